//! The harness's link as apalis's connection wire: every command a process
//! sends crosses the world's network to the store process, so every
//! network, process and store fault applies to it.

use crate::seam::Command;
use crate::Apalis;
use futures::future::BoxFuture;
use leasesim_redis_model::Reply;
use leasesim_vocab::ids::Owner;
use leasesim_world::world::link::Link;

pub struct LinkWire {
    pub link: Link<Apalis>,
    /// The process the commands come from (`None`: the application's
    /// client). The harness's note for its store seam; Redis sees nothing.
    pub owner: Option<Owner>,
}

impl crate::conn::Wire for LinkWire {
    fn call(&self, argv: Vec<Vec<u8>>) -> BoxFuture<'static, Reply> {
        let (link, owner) = (self.link.clone(), self.owner);
        Box::pin(async move { link.call(Command { argv, owner }).await })
    }
}
