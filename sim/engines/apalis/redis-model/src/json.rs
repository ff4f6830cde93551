//! `cjson.encode` and `cjson.decode`: a port of the lua-cjson 2.1.0 that
//! Redis 7.0 bundles, with its defaults (numbers as `%.14g`, `/` escaped,
//! sparse arrays refused beyond ratio 2 and 10 safe slots, nesting up to
//! 1000 deep both ways, and strtod's lenient numbers when decoding).
//!
//! Written by hand rather than with serde_json because the output must be
//! lua-cjson's byte for byte: object keys come out in Lua's table iteration
//! order (`lua_next`), and decoding builds tables in document order so that
//! later iteration over them matches the server's too.

use mlua::{Lua, Table, Value};

use crate::num::{format_g, strtod};

const MAX_ENCODE_DEPTH: usize = 1000;
const MAX_DECODE_DEPTH: usize = 1000;
const SPARSE_RATIO: usize = 2;
const SPARSE_SAFE: usize = 10;

/// lua-cjson's error text for a value it cannot encode.
fn cannot_serialise(value: &Value, reason: &str) -> String {
    format!("Cannot serialise {}: {reason}", lua_type_name(value))
}

/// `lua_typename`, which says "userdata" for light userdata too.
pub(crate) fn lua_type_name(value: &Value) -> &'static str {
    match value {
        Value::LightUserData(_) | Value::UserData(_) | Value::Error(_) => "userdata",
        Value::Integer(_) | Value::Number(_) => "number",
        other => other.type_name(),
    }
}

pub(crate) fn number_of(value: &Value) -> Option<f64> {
    match value {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

/// `cjson.encode(value)`; an error is the message lua-cjson raises.
pub(crate) fn encode(value: &Value) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    append_value(value, 0, &mut out)?;
    Ok(out)
}

fn append_value(value: &Value, depth: usize, out: &mut Vec<u8>) -> Result<(), String> {
    match value {
        Value::String(s) => append_string(&s.as_bytes(), out),
        Value::Integer(_) | Value::Number(_) => append_number(value, out)?,
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Table(t) => append_table(value, t, depth + 1, out)?,
        other => return Err(cannot_serialise(other, "type not supported")),
    }
    Ok(())
}

fn append_number(value: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    let n = number_of(value).expect("called for numbers only");
    if !n.is_finite() {
        return Err(cannot_serialise(value, "must not be NaN or Inf"));
    }
    out.extend_from_slice(format_g(n, 14).as_bytes());
    Ok(())
}

fn append_string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// A table is an array when every key is a positive integer (and it is not
/// too sparse); otherwise an object. The empty table is an object.
fn append_table(value: &Value, t: &Table, depth: usize, out: &mut Vec<u8>) -> Result<(), String> {
    if depth > MAX_ENCODE_DEPTH {
        return Err(format!("Cannot serialise, excessive nesting ({depth})"));
    }
    match array_length(value, t)? {
        Some(len) if len > 0 => {
            out.push(b'[');
            for i in 1..=len {
                if i > 1 {
                    out.push(b',');
                }
                let item: Value = t.raw_get(i).map_err(|e| e.to_string())?;
                append_value(&item, depth, out)?;
            }
            out.push(b']');
        }
        _ => append_object(t, depth, out)?,
    }
    Ok(())
}

/// `lua_array_length`: Some(max index) for a pure array, None for an object.
fn array_length(value: &Value, t: &Table) -> Result<Option<usize>, String> {
    let (mut max, mut items) = (0usize, 0usize);
    for pair in t.clone().pairs::<Value, Value>() {
        let (key, _) = pair.map_err(|e| e.to_string())?;
        match number_of(&key) {
            Some(k) if k != 0.0 && k.floor() == k && k >= 1.0 => {
                // lua-cjson keeps the maximum in a C int.
                max = max.max(k.min(i32::MAX as f64) as usize);
                items += 1;
            }
            _ => return Ok(None),
        }
    }
    if max > items * SPARSE_RATIO && max > SPARSE_SAFE {
        return Err(cannot_serialise(value, "excessively sparse array"));
    }
    Ok(Some(max))
}

fn append_object(t: &Table, depth: usize, out: &mut Vec<u8>) -> Result<(), String> {
    out.push(b'{');
    let mut first = true;
    for pair in t.clone().pairs::<Value, Value>() {
        let (key, item) = pair.map_err(|e| e.to_string())?;
        if !first {
            out.push(b',');
        }
        first = false;
        match &key {
            Value::Integer(_) | Value::Number(_) => {
                out.push(b'"');
                append_number(&key, out)?;
                out.extend_from_slice(b"\":");
            }
            Value::String(s) => {
                append_string(&s.as_bytes(), out);
                out.push(b':');
            }
            other => return Err(cannot_serialise(other, "table key must be a number or string")),
        }
        append_value(&item, depth, out)?;
    }
    out.push(b'}');
    Ok(())
}

/// The tokens of lua-cjson's tokenizer; names as its messages print them.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    String(Vec<u8>),
    Number(f64),
    Boolean(bool),
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

impl Token {
    fn name(&self) -> &'static str {
        match self {
            Token::ObjBegin => "T_OBJ_BEGIN",
            Token::ObjEnd => "T_OBJ_END",
            Token::ArrBegin => "T_ARR_BEGIN",
            Token::ArrEnd => "T_ARR_END",
            Token::String(_) => "T_STRING",
            Token::Number(_) => "T_NUMBER",
            Token::Boolean(_) => "T_BOOLEAN",
            Token::Null => "T_NULL",
            Token::Colon => "T_COLON",
            Token::Comma => "T_COMMA",
            Token::End => "T_END",
            Token::Error(reason) => reason,
        }
    }
}

/// The decoder's cursor over a C string (it ends at the first NUL).
struct Parser<'a> {
    data: &'a [u8],
    index: usize,
}

impl Parser<'_> {
    fn at(&self, i: usize) -> u8 {
        self.data.get(i).copied().unwrap_or(0)
    }

    /// The next token and the 0-based index it starts at.
    fn next_token(&mut self) -> (Token, usize) {
        while matches!(self.at(self.index), b' ' | b'\t' | b'\n' | b'\r') {
            self.index += 1;
        }
        let start = self.index;
        let single = match self.at(start) {
            b'{' => Some(Token::ObjBegin),
            b'}' => Some(Token::ObjEnd),
            b'[' => Some(Token::ArrBegin),
            b']' => Some(Token::ArrEnd),
            b',' => Some(Token::Comma),
            b':' => Some(Token::Colon),
            0 => return (Token::End, start),
            _ => None,
        };
        if let Some(token) = single {
            self.index += 1;
            return (token, start);
        }
        (self.multi_char_token(), start)
    }

    fn multi_char_token(&mut self) -> Token {
        let rest = &self.data[self.index.min(self.data.len())..];
        let c = self.at(self.index);
        if c == b'"' {
            return self.string_token();
        }
        if c == b'-' || c.is_ascii_digit() {
            return self.number_token();
        }
        for (word, token) in
            [(&b"true"[..], Token::Boolean(true)), (b"false", Token::Boolean(false)), (b"null", Token::Null)]
        {
            if rest.starts_with(word) {
                self.index += word.len();
                return token;
            }
        }
        // With refuse_invalid_numbers off, inf/nan/+ and hex go to strtod.
        if matches!(c, b'i' | b'I' | b'n' | b'N' | b'+') && is_invalid_number(rest) {
            return self.number_token();
        }
        Token::Error("invalid token")
    }

    fn number_token(&mut self) -> Token {
        let r = strtod(&self.data[self.index..]);
        if r.len == 0 {
            return Token::Error("invalid number");
        }
        self.index += r.len;
        Token::Number(r.value)
    }

    fn string_token(&mut self) -> Token {
        self.index += 1;
        let mut s = Vec::new();
        loop {
            let c = self.at(self.index);
            match c {
                b'"' => break,
                0 => return Token::Error("unexpected end of string"),
                b'\\' => {
                    let escaped = match self.at(self.index + 1) {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b't' => b'\t',
                        b'n' => b'\n',
                        b'f' => 0x0c,
                        b'r' => b'\r',
                        b'u' => match self.unicode_escape(&mut s) {
                            Some(()) => continue,
                            None => return Token::Error("invalid unicode escape code"),
                        },
                        _ => return Token::Error("invalid escape code"),
                    };
                    s.push(escaped);
                    self.index += 2;
                }
                _ => {
                    s.push(c);
                    self.index += 1;
                }
            }
        }
        self.index += 1;
        Token::String(s)
    }

    /// `\uXXXX`, or a surrogate pair of them, appended as UTF-8.
    fn unicode_escape(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let mut code = self.hex4(self.index + 2)?;
        let mut len = 6;
        if code & 0xF800 == 0xD800 {
            if code & 0x400 != 0 || self.at(self.index + 6) != b'\\' || self.at(self.index + 7) != b'u' {
                return None;
            }
            let low = self.hex4(self.index + 8)?;
            if low & 0xFC00 != 0xDC00 {
                return None;
            }
            code = (((code & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            len = 12;
        }
        push_utf8(code, out);
        self.index += len;
        Some(())
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        (0..4).try_fold(0u32, |acc, i| Some(acc << 4 | (self.at(at + i) as char).to_digit(16)?))
    }
}

/// `codepoint_to_utf8` (code points up to 0x10FFFF here, all encodable).
fn push_utf8(code: u32, out: &mut Vec<u8>) {
    match code {
        0..=0x7F => out.push(code as u8),
        0x80..=0x7FF => out.extend_from_slice(&[(code >> 6) as u8 | 0xC0, (code & 0x3F) as u8 | 0x80]),
        0x800..=0xFFFF => out.extend_from_slice(&[
            (code >> 12) as u8 | 0xE0,
            ((code >> 6) & 0x3F) as u8 | 0x80,
            (code & 0x3F) as u8 | 0x80,
        ]),
        _ => out.extend_from_slice(&[
            (code >> 18) as u8 | 0xF0,
            ((code >> 12) & 0x3F) as u8 | 0x80,
            ((code >> 6) & 0x3F) as u8 | 0x80,
            (code & 0x3F) as u8 | 0x80,
        ]),
    }
}

/// `json_is_invalid_number` for the tokens that reach it: `+...`, `inf...`
/// and `nan...` (any case).
fn is_invalid_number(s: &[u8]) -> bool {
    let starts = |w: &[u8]| s.len() >= w.len() && s[..w.len()].eq_ignore_ascii_case(w);
    s.first() == Some(&b'+') || starts(b"inf") || starts(b"nan")
}

/// `cjson.decode(text)`: Lua values, with `cjson.null` (a NULL light
/// userdata) for JSON null.
pub(crate) fn decode(lua: &Lua, text: &[u8]) -> Result<Value, String> {
    if text.len() >= 2 && (text[0] == 0 || text[1] == 0) {
        return Err("JSON parser does not support UTF-16 or UTF-32".to_string());
    }
    let mut p = Parser { data: text, index: 0 };
    let token = p.next_token();
    let value = process_value(lua, &mut p, token, 0)?;
    let (end, at) = p.next_token();
    if end != Token::End {
        return Err(parse_error("the end", &end, at));
    }
    Ok(value)
}

fn parse_error(expected: &str, found: &Token, at: usize) -> String {
    format!("Expected {expected} but found {} at character {}", found.name(), at + 1)
}

fn process_value(lua: &Lua, p: &mut Parser, (token, at): (Token, usize), depth: usize) -> Result<Value, String> {
    let lua_err = |e: mlua::Error| e.to_string();
    Ok(match token {
        Token::String(s) => Value::String(lua.create_string(&s).map_err(lua_err)?),
        Token::Number(n) => Value::Number(n),
        Token::Boolean(b) => Value::Boolean(b),
        Token::Null => Value::LightUserData(mlua::LightUserData(std::ptr::null_mut())),
        Token::ObjBegin | Token::ArrBegin if depth >= MAX_DECODE_DEPTH => {
            // p.index is just past the bracket: lua-cjson's 1-based position of it.
            return Err(format!("Found too many nested data structures ({}) at character {}", depth + 1, p.index));
        }
        Token::ObjBegin => Value::Table(parse_object(lua, p, depth + 1)?),
        Token::ArrBegin => Value::Table(parse_array(lua, p, depth + 1)?),
        other => return Err(parse_error("value", &other, at)),
    })
}

/// Keys are set in document order (a repeated key keeps the last value).
fn parse_object(lua: &Lua, p: &mut Parser, depth: usize) -> Result<Table, String> {
    let lua_err = |e: mlua::Error| e.to_string();
    let table = lua.create_table().map_err(lua_err)?;
    let mut token = p.next_token();
    if token.0 == Token::ObjEnd {
        return Ok(table);
    }
    loop {
        let Token::String(key) = &token.0 else {
            return Err(parse_error("object key string", &token.0, token.1));
        };
        let key = lua.create_string(key).map_err(lua_err)?;
        let colon = p.next_token();
        if colon.0 != Token::Colon {
            return Err(parse_error("colon", &colon.0, colon.1));
        }
        let next = p.next_token();
        let value = process_value(lua, p, next, depth)?;
        table.raw_set(key, value).map_err(lua_err)?;
        token = p.next_token();
        match token.0 {
            Token::ObjEnd => return Ok(table),
            Token::Comma => token = p.next_token(),
            _ => return Err(parse_error("comma or object end", &token.0, token.1)),
        }
    }
}

fn parse_array(lua: &Lua, p: &mut Parser, depth: usize) -> Result<Table, String> {
    let lua_err = |e: mlua::Error| e.to_string();
    let table = lua.create_table().map_err(lua_err)?;
    let mut token = p.next_token();
    if token.0 == Token::ArrEnd {
        return Ok(table);
    }
    for i in 1.. {
        let value = process_value(lua, p, token, depth)?;
        table.raw_set(i, value).map_err(lua_err)?;
        token = p.next_token();
        match token.0 {
            Token::ArrEnd => return Ok(table),
            Token::Comma => token = p.next_token(),
            _ => return Err(parse_error("comma or array end", &token.0, token.1)),
        }
    }
    unreachable!("the loop returns")
}
