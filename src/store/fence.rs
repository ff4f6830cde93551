//! The fence: the one check every attempt-scoped write passes through.

use super::Store;
use crate::defects::Defect;
use crate::ids::Fence;
use crate::proto::Rejection;
use crate::task::TaskState;

impl Store {
    /// Is `fence` the task's current attempt, still leased to its owner?
    /// A missing, terminal or superseded target is a terminal no-op.
    pub(super) fn check_fence(&self, fence: &Fence) -> Result<(), Rejection> {
        let task = self.tasks.get(&fence.task).ok_or(Rejection::Missing)?;
        if task.state.is_terminal() {
            return Err(Rejection::Terminal);
        }
        if task.attempt != fence.attempt {
            return Err(Rejection::Superseded);
        }
        if task.state != TaskState::Leased || task.owner != Some(fence.owner) {
            return Err(Rejection::NotOwner);
        }
        Ok(())
    }

    /// The fence of complete and fail writes.
    pub(super) fn check_outcome_fence(&self, fence: &Fence) -> Result<(), Rejection> {
        if self.cfg.defects.on(Defect::UnfencedCompletion) {
            // B1: applied by task id alone; any attempt can finish the task.
            let task = self.tasks.get(&fence.task).ok_or(Rejection::Missing)?;
            if task.state.is_terminal() {
                return Err(Rejection::Terminal);
            }
            return Ok(());
        }
        self.check_fence(fence)
    }
}
