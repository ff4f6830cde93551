//! Where each process lives on the simulated network. The store link
//! ([`super::link`]) carries requests and answers; an engine whose workers
//! talk to each other (peer notes) binds its own endpoints at these
//! addresses, and a partition (`Controller::clog`) cuts those too.

use leasesim_vocab::ids::ProcId;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

pub const PORT: u16 = 7000;

pub fn store_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))
}

pub fn client_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1))
}

pub fn worker_ip(proc: ProcId) -> IpAddr {
    assert!((1..=250).contains(&proc), "worker index out of range");
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, proc as u8))
}

pub fn addr(ip: IpAddr) -> SocketAddr {
    SocketAddr::new(ip, PORT)
}
