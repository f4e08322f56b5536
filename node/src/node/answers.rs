//! The answers the loop makes or sends off the loop: a reply handed to the
//! overlay, a status view read from the database, a log chunk or output
//! block answered once the store's writer wrote it, a checkpoint holder's
//! work. Each is a task of its own, all in one tracked set (gone with the
//! node), and at most [`MAX_ANSWERS`] at once.
//!
//! The overlay already bounds what peers can have under way (at most 100
//! streams per protocol and connection): the bound here holds whatever the
//! asker, and a request beyond it goes unanswered (its asker's call fails,
//! as for a peer that is gone) rather than growing the node.

use std::future::Future;

use tokio::task::JoinSet;

/// The most answers under way at once.
pub(super) const MAX_ANSWERS: usize = 4096;

/// The tasks making or sending answers.
pub(super) struct Answers {
    tasks: JoinSet<()>,
    max: usize,
    /// Answers not run because `max` were under way.
    dropped: u64,
}

impl Answers {
    pub(super) fn new(max: usize) -> Self {
        Answers {
            tasks: JoinSet::new(),
            max,
            dropped: 0,
        }
    }

    /// Runs `answer` as a task of its own, unless `max` are under way:
    /// then it is dropped unrun, and `false` says so.
    pub(super) fn spawn(&mut self, answer: impl Future<Output = ()> + Send + 'static) -> bool {
        self.reap();
        if self.tasks.len() >= self.max {
            self.dropped += 1;
            return false;
        }
        self.tasks.spawn(answer);
        true
    }

    /// How many answers are under way.
    pub(super) fn under_way(&mut self) -> usize {
        self.reap();
        self.tasks.len()
    }

    /// How many answers were dropped, over the node's life.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Forgets the answers that are done; one that panicked is logged
    /// (the node goes on: the asker's call fails).
    fn reap(&mut self) {
        while let Some(done) = self.tasks.try_join_next() {
            if let Err(e) = done
                && e.is_panic()
            {
                tracing::error!("an answer's task panicked: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn answers_beyond_the_bound_are_dropped_unrun() {
        let mut answers = Answers::new(2);
        let ran = Arc::new(AtomicUsize::new(0));
        let mut gates = Vec::new();
        for _ in 0..3 {
            let (tx, rx) = oneshot::channel::<()>();
            gates.push(tx);
            let ran = ran.clone();
            let _ = answers.spawn(async move {
                let _ = rx.await;
                ran.fetch_add(1, Ordering::SeqCst);
            });
        }
        assert_eq!(answers.under_way(), 2);
        assert_eq!(answers.dropped(), 1);
        drop(gates);
        // Both run to their end; the third never ran.
        while answers.under_way() > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(ran.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_finished_answer_makes_room_for_the_next() {
        let mut answers = Answers::new(1);
        let (tx, rx) = oneshot::channel::<()>();
        assert!(answers.spawn(async move {
            let _ = rx.await;
        }));
        assert!(!answers.spawn(async {}));
        tx.send(()).unwrap();
        while answers.under_way() > 0 {
            tokio::task::yield_now().await;
        }
        assert!(answers.spawn(async {}));
        assert_eq!(answers.dropped(), 1);
    }

    #[tokio::test]
    async fn a_panicking_answer_is_reaped_and_the_set_goes_on() {
        let mut answers = Answers::new(1);
        assert!(answers.spawn(async { panic!("a broken answer") }));
        while answers.under_way() > 0 {
            tokio::task::yield_now().await;
        }
        assert!(answers.spawn(async {}));
    }

    #[tokio::test]
    async fn dropping_the_set_stops_the_answers_under_way() {
        let mut answers = Answers::new(4);
        let (tx, rx) = oneshot::channel::<()>();
        let (_gate, wait) = oneshot::channel::<()>();
        assert!(answers.spawn(async move {
            let _tx = tx;
            let _ = wait.await;
        }));
        drop(answers);
        // The task was aborted: its sender is dropped unsent.
        assert!(rx.await.is_err());
    }
}
