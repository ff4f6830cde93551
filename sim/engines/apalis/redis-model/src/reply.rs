//! RESP2 replies, and the error texts Redis 7.0 sends.

/// One RESP2 reply. `Error` holds the text after the protocol's `-`, e.g.
/// `"WRONGTYPE Operation against a key holding the wrong kind of value"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

pub(crate) const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub(crate) const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
pub(crate) const NOT_A_FLOAT: &str = "ERR value is not a valid float";
pub(crate) const SYNTAX: &str = "ERR syntax error";
pub(crate) const OVERFLOW: &str = "ERR increment or decrement would overflow";
pub(crate) const RANGE_NOT_FLOAT: &str = "ERR min or max is not a float";
pub(crate) const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

impl Reply {
    pub fn ok() -> Reply {
        Reply::Status("OK".to_string())
    }

    pub fn error(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn nil() -> Reply {
        Reply::Bulk(None)
    }

    pub fn bulk(bytes: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(Some(bytes.into()))
    }

    pub fn empty_array() -> Reply {
        Reply::Array(Some(Vec::new()))
    }

    /// An array of bulk strings.
    pub fn bulks<I, B>(items: I) -> Reply
    where
        I: IntoIterator<Item = B>,
        B: Into<Vec<u8>>,
    {
        Reply::Array(Some(items.into_iter().map(Reply::bulk).collect()))
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// `ERR wrong number of arguments for 'get' command`; `name` is the
    /// command's lowercase full name (`script|load` for a subcommand).
    pub fn wrong_arity(name: &str) -> Reply {
        Reply::Error(format!("ERR wrong number of arguments for '{name}' command"))
    }

    pub fn wrongtype() -> Reply {
        Reply::error(WRONGTYPE)
    }
}

/// Redis builds error replies with `addReplyErrorFormat`, which trims
/// trailing CR/LF and turns the ones inside into spaces, so that the error
/// stays one protocol line.
pub(crate) fn one_line_error(text: &str) -> String {
    text.trim_end_matches(['\r', '\n']).replace(['\r', '\n'], " ")
}

/// Lossy text of client bytes inside an error message (Redis would echo the
/// raw bytes; replies hold `String`s).
pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
