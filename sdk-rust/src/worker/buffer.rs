//! The bounded buffer of completions waiting to be sent.

use std::collections::VecDeque;

use converge_proto::worker_v1::StageComplete;

/// Completions, oldest first: those not yet handed to a stream (while
/// connected drained at once; while disconnected held for redelivery), and
/// those sent but not yet acknowledged by the broker.
///
/// Overflow policy: when full, the OLDEST result is discarded. Its lease is
/// the likeliest to be past its deadline or already reclaimed by the broker
/// (which then re-runs the task), while the newest results are the likeliest
/// to still pass the fence.
#[derive(Debug)]
pub(crate) struct ResultBuffer {
    items: VecDeque<StageComplete>,
    capacity: usize,
}

impl ResultBuffer {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            items: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Appends a result; returns the one discarded to make room, if any.
    pub(crate) fn push(&mut self, complete: StageComplete) -> Option<StageComplete> {
        let dropped = if self.items.len() >= self.capacity {
            self.items.pop_front()
        } else {
            None
        };
        self.items.push_back(complete);
        dropped
    }

    /// Puts back a result that could not be sent, at the front so order is
    /// kept. Returns it instead if the buffer filled up meanwhile (it is the
    /// oldest, so the overflow policy discards it).
    pub(crate) fn push_front(&mut self, complete: StageComplete) -> Option<StageComplete> {
        if self.items.len() >= self.capacity {
            return Some(complete);
        }
        self.items.push_front(complete);
        None
    }

    pub(crate) fn pop(&mut self) -> Option<StageComplete> {
        self.items.pop_front()
    }

    /// Takes the newest result.
    pub(crate) fn pop_back(&mut self) -> Option<StageComplete> {
        self.items.pop_back()
    }

    /// Keeps only the results `keep` says yes to.
    pub(crate) fn retain(&mut self, keep: impl FnMut(&StageComplete) -> bool) {
        self.items.retain(keep);
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Lease tokens and epochs of the buffered results.
    pub(crate) fn leases(&self) -> impl Iterator<Item = (&str, i64)> {
        self.items.iter().map(|c| (c.lease_token.as_str(), c.claim_epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(token: &str) -> StageComplete {
        StageComplete {
            lease_token: token.into(),
            ..Default::default()
        }
    }

    #[test]
    fn overflow_discards_the_oldest() {
        let mut buffer = ResultBuffer::new(2);
        assert!(buffer.push(complete("a")).is_none());
        assert!(buffer.push(complete("b")).is_none());
        let dropped = buffer.push(complete("c")).unwrap();
        assert_eq!(dropped.lease_token, "a");
        assert_eq!(buffer.len(), 2);
        let front = buffer.pop().unwrap();
        assert_eq!(front.lease_token, "b");
        assert!(buffer.push_front(front).is_none());
        assert_eq!(buffer.push_front(complete("z")).unwrap().lease_token, "z");
        let tokens: Vec<_> = buffer.leases().map(|(t, _)| t.to_owned()).collect();
        assert_eq!(tokens, ["b", "c"]);
    }
}
