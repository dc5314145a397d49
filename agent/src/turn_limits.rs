//! How many turns run at once: `agent.max_concurrent_turns` across all workstreams and
//! `agent.max_turns_per_user` per author, so N busy threads cannot start N model streams and
//! 4×N processes.
//!
//! A turn takes its author's place first and then a global one, so someone waiting for their
//! own turns never blocks a global place that others could use. Waiting is cancellable: a
//! stopped turn drops its place in line (tokio's semaphores are fair, first come first
//! served). Places are released when the [`TurnPermit`] drops, however the turn ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::protocol::TurnWait;

/// The places turns take. Cheap to share behind the agent.
#[derive(Debug)]
pub struct TurnLimits {
    global: Arc<Semaphore>,
    max_global: usize,
    max_per_user: usize,
    users: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

/// A running turn's places; dropping it frees them.
#[derive(Debug)]
pub struct TurnPermit {
    _global: OwnedSemaphorePermit,
    _user: Option<UserSlot>,
}

/// One author's place (or a wait for one). Its semaphore is dropped from the map when no
/// turn of that author runs or waits, so the map holds only active authors.
#[derive(Debug)]
struct UserSlot {
    users: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
    user: String,
    semaphore: Option<Arc<Semaphore>>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for UserSlot {
    fn drop(&mut self) {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        self.permit = None;
        self.semaphore = None;
        if users
            .get(&self.user)
            .is_some_and(|s| Arc::strong_count(s) == 1)
        {
            users.remove(&self.user);
        }
    }
}

impl TurnLimits {
    /// At most `max_global` turns in all, `max_per_user` per author (each at least 1).
    pub fn new(max_global: usize, max_per_user: usize) -> Self {
        let max_global = max_global.max(1);
        Self {
            global: Arc::new(Semaphore::new(max_global)),
            max_global,
            max_per_user: max_per_user.max(1),
            users: Arc::default(),
        }
    }

    /// Turns running now (for logs and tests).
    pub fn running(&self) -> usize {
        self.max_global - self.global.available_permits()
    }

    /// Takes a place for a turn by `author` (`None`: only the global limit applies). When it
    /// has to wait, `on_wait` is called once first with the reason, so the thread can say
    /// so. Returns `None` when `cancel` fires while waiting; the place in line is given up.
    pub async fn acquire(
        &self,
        author: Option<&str>,
        cancel: &CancellationToken,
        mut on_wait: impl FnMut(TurnWait),
    ) -> Option<TurnPermit> {
        let mut waited = false;
        let user = match author {
            Some(author) => {
                let mut slot = self.user_slot(author);
                let semaphore = slot.semaphore.clone()?;
                let permit = match semaphore.clone().try_acquire_owned() {
                    Ok(permit) => permit,
                    Err(_) => {
                        waited = true;
                        on_wait(TurnWait::UserBusy {
                            running: self.max_per_user,
                        });
                        tokio::select! {
                            permit = semaphore.acquire_owned() => permit.ok()?,
                            () = cancel.cancelled() => return None,
                        }
                    }
                };
                slot.permit = Some(permit);
                Some(slot)
            }
            None => None,
        };
        let global = match self.global.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if !waited {
                    on_wait(TurnWait::Busy {
                        running: self.max_global,
                    });
                }
                tokio::select! {
                    permit = self.global.clone().acquire_owned() => permit.ok()?,
                    () = cancel.cancelled() => return None,
                }
            }
        };
        Some(TurnPermit {
            _global: global,
            _user: user,
        })
    }

    fn user_slot(&self, user: &str) -> UserSlot {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let semaphore = users
            .entry(user.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.max_per_user)))
            .clone();
        UserSlot {
            users: self.users.clone(),
            user: user.to_owned(),
            semaphore: Some(semaphore),
            permit: None,
        }
    }

    /// Authors with a turn running or waiting (for tests: the map does not grow).
    pub fn active_authors(&self) -> usize {
        self.users.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::time::Duration;

    async fn take(
        limits: &TurnLimits,
        author: Option<&str>,
    ) -> (Option<TurnPermit>, Vec<TurnWait>) {
        let mut waits = Vec::new();
        let permit = limits
            .acquire(author, &CancellationToken::new(), |w| waits.push(w))
            .await;
        (permit, waits)
    }

    #[tokio::test]
    async fn turns_within_the_limits_start_at_once() {
        let limits = TurnLimits::new(2, 1);
        let (a, waits_a) = take(&limits, Some("alice")).await;
        let (b, waits_b) = take(&limits, Some("bob")).await;
        assert!(a.is_some() && b.is_some());
        assert_eq!((waits_a, waits_b), (vec![], vec![]));
        assert_eq!(limits.running(), 2);
        drop((a, b));
        assert_eq!((limits.running(), limits.active_authors()), (0, 0));
    }

    #[tokio::test]
    async fn a_turn_over_the_global_limit_says_so_once_and_starts_when_one_ends() {
        let limits = Arc::new(TurnLimits::new(1, 4));
        let (first, _) = take(&limits, Some("alice")).await;
        let waiter = {
            let limits = limits.clone();
            tokio::spawn(async move { take(&limits, Some("bob")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(first);
        let (second, waits) = waiter.await.unwrap();
        assert!(second.is_some());
        assert_eq!(waits, vec![TurnWait::Busy { running: 1 }]);
    }

    #[tokio::test]
    async fn one_author_over_their_limit_waits_while_others_start() {
        let limits = Arc::new(TurnLimits::new(8, 1));
        let (first, _) = take(&limits, Some("alice")).await;
        let waiter = {
            let limits = limits.clone();
            tokio::spawn(async move { take(&limits, Some("alice")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        // Her waiting turn holds no global place: bob starts at once.
        let (bob, bob_waits) = take(&limits, Some("bob")).await;
        assert!(bob.is_some() && bob_waits.is_empty());
        drop(first);
        let (second, waits) = waiter.await.unwrap();
        assert!(second.is_some());
        assert_eq!(waits, vec![TurnWait::UserBusy { running: 1 }]);
    }

    #[tokio::test]
    async fn a_stopped_waiting_turn_gives_up_its_place() {
        let limits = Arc::new(TurnLimits::new(1, 1));
        let (first, _) = take(&limits, Some("alice")).await;
        let cancel = CancellationToken::new();
        let waiter = {
            let (limits, cancel) = (limits.clone(), cancel.clone());
            tokio::spawn(async move { limits.acquire(Some("bob"), &cancel, |_| {}).await })
        };
        let next = {
            let limits = limits.clone();
            tokio::spawn(async move { take(&limits, Some("carol")).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
        assert!(waiter.await.unwrap().is_none());
        drop(first);
        let (carol, _) = next.await.unwrap();
        assert!(carol.is_some(), "the place bob gave up went to carol");
        drop(carol);
        assert_eq!((limits.running(), limits.active_authors()), (0, 0));
    }
}
