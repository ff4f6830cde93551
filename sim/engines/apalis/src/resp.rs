//! The model's answers as the `redis` crate reads them off a socket.
//!
//! A real connection hands apalis whatever `redis`'s own RESP parser makes
//! of the server's bytes (errors classified by their first word, NOSCRIPT
//! included, which `Script::invoke_async` relies on to load a script). So
//! the connection writes each model reply as RESP2 bytes and lets that
//! same parser read them: apalis sees exactly the values, and the errors,
//! a socket would give it.

use leasesim_redis_model::Reply;

/// `reply` in RESP2, as redis-server 7 writes it.
pub fn encode(reply: &Reply, out: &mut Vec<u8>) {
    match reply {
        Reply::Status(s) => line(out, b'+', s.as_bytes()),
        // A server error is one line: a newline inside would end it early.
        Reply::Error(s) => line(out, b'-', s.replace(['\r', '\n'], " ").as_bytes()),
        Reply::Int(n) => line(out, b':', n.to_string().as_bytes()),
        Reply::Bulk(None) => out.extend_from_slice(b"$-1\r\n"),
        Reply::Bulk(Some(bytes)) => {
            line(out, b'$', bytes.len().to_string().as_bytes());
            out.extend_from_slice(bytes);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Array(None) => out.extend_from_slice(b"*-1\r\n"),
        Reply::Array(Some(items)) => {
            line(out, b'*', items.len().to_string().as_bytes());
            for item in items {
                encode(item, out);
            }
        }
    }
}

fn line(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

/// `reply` as the `redis` crate's parser reads it.
///
/// Most replies are built directly, as that parser builds them from RESP2
/// (`+OK` is `Okay`, another status a `SimpleString`, `$-1` and `*-1` are
/// `Nil`): writing them out and parsing them back was about 4% of an
/// apalis world. What the parser judges for itself still goes through it:
/// every error (its kind is read from its first word), a status that would
/// not be one line, and arrays nested deep enough to meet its depth limit.
/// `tests::direct_replies_read_as_the_parser_reads_them` compares the two.
pub fn to_value(reply: &Reply) -> redis::RedisResult<redis::Value> {
    match direct(reply, 0) {
        Some(value) => Ok(value),
        None => parsed(reply),
    }
}

/// `reply` written as RESP2 and read back by the `redis` crate's parser.
fn parsed(reply: &Reply) -> redis::RedisResult<redis::Value> {
    let mut bytes = Vec::new();
    encode(reply, &mut bytes);
    redis::parse_redis_value(&bytes)
}

/// Well under the parser's recursion limit (100 levels).
const DIRECT_DEPTH: usize = 32;

/// `reply` as the parser would read it, or `None` where the parser decides.
fn direct(reply: &Reply, depth: usize) -> Option<redis::Value> {
    use redis::Value;
    Some(match reply {
        Reply::Status(s) if s.contains(['\r', '\n']) => return None,
        Reply::Status(s) if s == "OK" => Value::Okay,
        Reply::Status(s) => Value::SimpleString(s.clone()),
        Reply::Error(_) => return None,
        Reply::Int(n) => Value::Int(*n),
        Reply::Bulk(None) | Reply::Array(None) => Value::Nil,
        Reply::Bulk(Some(bytes)) => Value::BulkString(bytes.clone()),
        Reply::Array(Some(_)) if depth >= DIRECT_DEPTH => return None,
        Reply::Array(Some(items)) => {
            Value::Array(items.iter().map(|item| direct(item, depth + 1)).collect::<Option<Vec<_>>>()?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn check(reply: Reply, want: Value) {
        assert_eq!(to_value(&reply).expect("parses"), want, "{reply:?}");
    }

    #[test]
    fn replies_read_as_a_socket_reads_them() {
        check(Reply::Status("OK".into()), Value::Okay);
        check(Reply::Status("QUEUED".into()), Value::SimpleString("QUEUED".into()));
        check(Reply::Int(-3), Value::Int(-3));
        check(Reply::Bulk(None), Value::Nil);
        check(Reply::Bulk(Some(b"a\r\nb".to_vec())), Value::BulkString(b"a\r\nb".to_vec()));
        check(Reply::Array(None), Value::Nil);
        check(
            Reply::Array(Some(vec![Reply::Int(1), Reply::Array(Some(vec![]))])),
            Value::Array(vec![Value::Int(1), Value::Array(vec![])]),
        );
    }

    /// The direct path and the parser agree on every kind of reply, nested
    /// ones (an error inside an array, an array at the depth limit) included.
    #[test]
    fn direct_replies_read_as_the_parser_reads_them() {
        let mut deep = Reply::Int(7);
        let mut replies = vec![
            Reply::Status("OK".into()),
            Reply::Status("PONG".into()),
            Reply::Status("two\r\nlines".into()),
            Reply::Status("ok ".into()),
            Reply::Int(i64::MIN),
            Reply::Int(0),
            Reply::Bulk(None),
            Reply::Bulk(Some(Vec::new())),
            Reply::Bulk(Some(vec![0, 255, b'\r', b'\n'])),
            Reply::Array(None),
            Reply::Array(Some(vec![])),
            Reply::Error("ERR x".into()),
            Reply::Array(Some(vec![Reply::Bulk(Some(b"a".to_vec())), Reply::Error("NOSCRIPT gone".into())])),
            Reply::Array(Some(vec![Reply::Array(Some(vec![Reply::Bulk(None), Reply::Int(3)])), Reply::Array(None)])),
        ];
        for level in 0..120 {
            deep = Reply::Array(Some(vec![deep]));
            if level % 7 == 0 || (28..36).contains(&level) || (95..105).contains(&level) {
                replies.push(deep.clone());
            }
        }
        for reply in replies {
            let (direct, parsed) = (to_value(&reply), parsed(&reply));
            match (&direct, &parsed) {
                (Ok(d), Ok(p)) => assert_eq!(d, p, "{reply:?}"),
                (Err(d), Err(p)) => assert_eq!(format!("{d:?}"), format!("{p:?}"), "{reply:?}"),
                _ => panic!("{reply:?}: direct {direct:?}, parsed {parsed:?}"),
            }
        }
    }

    #[test]
    fn errors_keep_their_kind() {
        let noscript = to_value(&Reply::Error("NOSCRIPT No matching script. Please use EVAL.".into())).unwrap();
        let err = noscript.extract_error().expect_err("an error reply");
        assert_eq!(err.kind(), redis::ErrorKind::Server(redis::ServerErrorKind::NoScript));
        let wrongtype = to_value(&Reply::Error("WRONGTYPE Operation against a key".into())).unwrap();
        assert!(wrongtype.extract_error().is_err());
    }
}
