//! Typed access to a statement's bound parameters, with the errors
//! PostgreSQL (or the driver) gives for a wrong count or type.

use graphile_worker_database::{DbError, DbValue};
use serde_json::Value;

use crate::time::{self, Ts};
use crate::Fail;

pub(crate) struct Params<'a> {
    values: &'a [DbValue],
}

fn type_error(index: usize, expected: &str, got: &DbValue) -> Fail {
    Fail::Bad(DbError::new(format!(
        "leasesim graphile model: parameter ${} should be {expected}, got {got:?}",
        index + 1
    )))
}

impl<'a> Params<'a> {
    /// Checks the count as PostgreSQL's bind does (SQLSTATE 08P01).
    pub(crate) fn new(values: &'a [DbValue], expected: usize) -> Result<Params<'a>, Fail> {
        if values.len() != expected {
            let msg = format!(
                "bind message supplies {} parameters, but prepared statement requires {expected}",
                values.len()
            );
            return Err(Fail::Error(DbError::with_code(msg, "08P01")));
        }
        Ok(Params { values })
    }

    fn at(&self, index: usize) -> &'a DbValue {
        &self.values[index]
    }

    pub(crate) fn text_opt(&self, index: usize) -> Result<Option<String>, Fail> {
        match self.at(index) {
            DbValue::Text(s) => Ok(Some(s.clone())),
            DbValue::TextOpt(s) => Ok(s.clone()),
            other => Err(type_error(index, "text", other)),
        }
    }

    pub(crate) fn i32_opt(&self, index: usize) -> Result<Option<i32>, Fail> {
        match self.at(index) {
            DbValue::I32(v) => Ok(Some(*v)),
            DbValue::I32Opt(v) => Ok(*v),
            DbValue::I16(v) => Ok(Some(i32::from(*v))),
            DbValue::I16Opt(v) => Ok(v.map(i32::from)),
            other => Err(type_error(index, "int4", other)),
        }
    }

    pub(crate) fn i64_opt(&self, index: usize) -> Result<Option<i64>, Fail> {
        match self.at(index) {
            DbValue::I64(v) => Ok(Some(*v)),
            DbValue::I64Opt(v) => Ok(*v),
            other => Err(type_error(index, "int8", other)),
        }
    }

    pub(crate) fn bool_opt(&self, index: usize) -> Result<Option<bool>, Fail> {
        match self.at(index) {
            DbValue::Bool(v) => Ok(Some(*v)),
            DbValue::BoolOpt(v) => Ok(*v),
            other => Err(type_error(index, "bool", other)),
        }
    }

    /// A `json` parameter: `None` is SQL NULL, `Some(Value::Null)` is the
    /// JSON value `null` (tokio-postgres writes it as the text `null`).
    pub(crate) fn json_opt(&self, index: usize) -> Result<Option<Value>, Fail> {
        match self.at(index) {
            DbValue::Json(v) => Ok(Some(v.clone())),
            DbValue::JsonOpt(v) => Ok(v.clone()),
            other => Err(type_error(index, "json", other)),
        }
    }

    pub(crate) fn ts_opt(&self, index: usize) -> Result<Option<Ts>, Fail> {
        match self.at(index) {
            DbValue::TimestampTz(v) => Ok(Some(time::bound(*v))),
            DbValue::TimestampTzOpt(v) => Ok(v.map(time::bound)),
            other => Err(type_error(index, "timestamptz", other)),
        }
    }

    pub(crate) fn text_array_opt(&self, index: usize) -> Result<Option<Vec<String>>, Fail> {
        match self.at(index) {
            DbValue::TextArray(v) => Ok(Some(v.clone())),
            DbValue::TextArrayOpt(v) => Ok(v.clone()),
            other => Err(type_error(index, "text[]", other)),
        }
    }

    pub(crate) fn i64_array(&self, index: usize) -> Result<Vec<i64>, Fail> {
        match self.at(index) {
            DbValue::I64Array(v) => Ok(v.clone()),
            other => Err(type_error(index, "int8[]", other)),
        }
    }

    pub(crate) fn i32_array(&self, index: usize) -> Result<Vec<i32>, Fail> {
        match self.at(index) {
            DbValue::I32Array(v) => Ok(v.clone()),
            other => Err(type_error(index, "int4[]", other)),
        }
    }
}
