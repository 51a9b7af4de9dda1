//! Java thread names by Linux tid, for naming samples, kept only as long as a thread can still
//! have samples waiting to be named.
//!
//! A name is learnt at ThreadStart (on the thread itself). At ThreadEnd the thread may still have
//! samples in an engine's ring that the writer has not taken yet, so while a session runs the
//! name is not dropped there: the tid goes on an `ended` list. The writer takes that list before
//! it polls the engines and forgets those names after the poll, when every sample the thread
//! made before its end has been named. Without a session nothing waits, and the name goes at once.
//!
//! So the table holds the live threads plus those that ended since the last poll, however many
//! threads the JVM starts in its life. A tid the kernel reuses for a new thread gets the new name:
//! each name carries the serial number of its ThreadStart, and forgetting an ended thread
//! removes its name only if no newer thread has taken the tid since.

use std::collections::HashMap;

/// At most this many ended threads wait for the writer; past it (a stalled or finished session
/// that no writer drains) a name is forgotten at ThreadEnd, as without a session.
pub const MAX_ENDED: usize = 1 << 16;

/// One thread that ended: its tid and the serial of the name it had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub tid: u32,
    serial: u64,
}

#[derive(Default)]
pub struct ThreadNames {
    /// tid → (serial of the ThreadStart that named it, Java name).
    by_tid: HashMap<u32, (u64, String)>,
    ended: Vec<Ended>,
    next_serial: u64,
}

impl ThreadNames {
    /// A Java thread started on `tid` with `name`.
    pub fn started(&mut self, tid: u32, name: String) {
        self.next_serial += 1;
        self.by_tid.insert(tid, (self.next_serial, name));
    }

    /// The thread on `tid` ended. With `keep` (a session may still hold its samples) its name
    /// stays until the writer forgets it; otherwise it goes now.
    pub fn ended(&mut self, tid: u32, keep: bool) {
        let Some(&(serial, _)) = self.by_tid.get(&tid) else {
            return;
        };
        if keep && self.ended.len() < MAX_ENDED {
            self.ended.push(Ended { tid, serial });
        } else {
            self.by_tid.remove(&tid);
        }
    }

    /// The Java name of the thread on `tid`, if it was seen starting.
    pub fn get(&self, tid: u32) -> Option<&str> {
        self.by_tid.get(&tid).map(|(_, n)| n.as_str())
    }

    /// The threads that ended since the last call (the writer takes them before a poll).
    pub fn take_ended(&mut self) -> Vec<Ended> {
        std::mem::take(&mut self.ended)
    }

    /// Drops the names of `ended` threads, unless a newer thread has the tid now.
    pub fn forget(&mut self, ended: &[Ended]) {
        for e in ended {
            if self.by_tid.get(&e.tid).is_some_and(|(s, _)| *s == e.serial) {
                self.by_tid.remove(&e.tid);
            }
        }
    }

    /// How many names are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_tid.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_thread_keeps_its_name_until_the_writer_forgets_it() {
        let mut n = ThreadNames::default();
        n.started(7, "worker-1".into());
        n.ended(7, true);
        assert_eq!(n.get(7), Some("worker-1"));
        let ended = n.take_ended();
        assert_eq!(n.get(7), Some("worker-1"), "named while the writer polls");
        n.forget(&ended);
        assert_eq!(n.get(7), None);
        assert_eq!(n.len(), 0);
        assert!(n.take_ended().is_empty());
    }

    #[test]
    fn without_a_session_the_name_goes_at_once() {
        let mut n = ThreadNames::default();
        n.started(7, "worker-1".into());
        n.ended(7, false);
        assert_eq!(n.get(7), None);
        assert!(n.take_ended().is_empty());
    }

    #[test]
    fn a_reused_tid_keeps_the_new_threads_name() {
        let mut n = ThreadNames::default();
        n.started(7, "old".into());
        n.ended(7, true);
        n.started(7, "new".into());
        let ended = n.take_ended();
        n.forget(&ended);
        assert_eq!(n.get(7), Some("new"));
    }

    #[test]
    fn churn_leaves_only_the_live_threads() {
        let mut n = ThreadNames::default();
        n.started(1, "main".into());
        for round in 0..100u32 {
            for i in 0..1000u32 {
                n.started(10 + round * 1000 + i, format!("t-{i}"));
            }
            for i in 0..1000u32 {
                n.ended(10 + round * 1000 + i, true);
            }
            let ended = n.take_ended();
            n.forget(&ended);
            assert_eq!(n.len(), 1);
        }
        assert_eq!(n.get(1), Some("main"));
    }

    #[test]
    fn the_ended_list_is_bounded_when_nobody_drains_it() {
        let mut n = ThreadNames::default();
        for tid in 0..(MAX_ENDED as u32 + 10) {
            n.started(tid, "t".into());
            n.ended(tid, true);
        }
        assert_eq!(n.len(), MAX_ENDED);
        assert_eq!(n.take_ended().len(), MAX_ENDED);
    }

    #[test]
    fn an_unknown_thread_ending_is_ignored() {
        let mut n = ThreadNames::default();
        n.ended(3, true);
        assert!(n.take_ended().is_empty());
    }
}
