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
pub fn to_value(reply: &Reply) -> redis::RedisResult<redis::Value> {
    let mut bytes = Vec::new();
    encode(reply, &mut bytes);
    redis::parse_redis_value(&bytes)
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

    #[test]
    fn errors_keep_their_kind() {
        let noscript = to_value(&Reply::Error("NOSCRIPT No matching script. Please use EVAL.".into())).unwrap();
        let err = noscript.extract_error().expect_err("an error reply");
        assert_eq!(err.kind(), redis::ErrorKind::Server(redis::ServerErrorKind::NoScript));
        let wrongtype = to_value(&Reply::Error("WRONGTYPE Operation against a key".into())).unwrap();
        assert!(wrongtype.extract_error().is_err());
    }
}
