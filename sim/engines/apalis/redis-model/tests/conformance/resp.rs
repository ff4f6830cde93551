//! A minimal blocking RESP2 client over a TcpStream, answering with the
//! model's own `Reply` type so the two can be compared directly.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use leasesim_redis_model::Reply;

pub struct Connection {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Connection {
    pub fn open(port: u16) -> io::Result<Connection> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Connection { reader: BufReader::new(stream.try_clone()?), writer: stream })
    }

    /// Sends several commands at once, then reads their replies in order.
    pub fn pipeline(&mut self, commands: &[&[Vec<u8>]]) -> io::Result<Vec<Reply>> {
        let mut out = Vec::new();
        for argv in commands {
            encode(argv, &mut out);
        }
        self.writer.write_all(&out)?;
        commands.iter().map(|_| self.read_reply()).collect()
    }

    pub fn call(&mut self, argv: &[Vec<u8>]) -> io::Result<Reply> {
        Ok(self.pipeline(&[argv])?.remove(0))
    }

    fn read_line(&mut self) -> io::Result<Vec<u8>> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\r\n") {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-reply"));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    fn read_reply(&mut self) -> io::Result<Reply> {
        let line = self.read_line()?;
        let (kind, rest) = line.split_first().ok_or_else(|| bad("empty reply line"))?;
        let text = || String::from_utf8_lossy(rest).into_owned();
        let number = || text().parse::<i64>().map_err(|_| bad("bad length or integer"));
        Ok(match kind {
            b'+' => Reply::Status(text()),
            b'-' => Reply::Error(text()),
            b':' => Reply::Int(number()?),
            b'$' => match number()? {
                n if n < 0 => Reply::Bulk(None),
                n => {
                    let mut data = vec![0; n as usize + 2];
                    self.reader.read_exact(&mut data)?;
                    data.truncate(n as usize);
                    Reply::Bulk(Some(data))
                }
            },
            b'*' => match number()? {
                n if n < 0 => Reply::Array(None),
                n => Reply::Array(Some((0..n).map(|_| self.read_reply()).collect::<io::Result<_>>()?)),
            },
            _ => return Err(bad("unknown reply type")),
        })
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn encode(argv: &[Vec<u8>], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", argv.len()).as_bytes());
    for arg in argv {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}
