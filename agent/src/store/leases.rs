//! The `workstream_leases` and `handoffs` tables: which node owns which workstream, and work
//! waiting for its owner (see [`crate::cluster`]).
//!
//! A lease is taken with optimistic concurrency: read the row, then insert or update it on the
//! condition that it is still what was read. Whoever's write lands owns the workstream; the
//! others read the new owner. No lock is held between the two statements, and both backends
//! run the same queries.
//!
//! Every instant here is the database's: an expiry is written as the database's clock plus
//! the lease, and a lease is dead when the database's clock has passed it. No node's clock is
//! an input, so a node whose clock runs hours ahead still sees a live lease as live, and one
//! whose clock runs behind still writes an expiry that others respect: skew between nodes can
//! never give a workstream two owners.

use sqlx::AssertSqlSafe;

use super::{Backend, Store, StoreError};

/// The database's clock in unix milliseconds, as SQL.
fn db_now(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "CAST(unixepoch('subsec') * 1000 AS BIGINT)",
        Backend::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
    }
}

/// Whom a claim may take a lease from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Several nodes share the database: another node's lease is dead once the database's
    /// clock has passed its expiry.
    Shared,
    /// This node is the only one (SQLite): any lease another node left is dead.
    Alone,
}

impl Liveness {
    /// SQL for the instant before which another node's lease is dead.
    fn dead_before(self, backend: Backend) -> &'static str {
        match self {
            Liveness::Shared => db_now(backend),
            Liveness::Alone => "9223372036854775807",
        }
    }
}

/// What a node learns when it asks for a workstream's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This node owns the workstream now.
    Ours {
        /// Another node held it before (its lease had expired): what this node has in memory
        /// about the workstream may be stale.
        taken_over: bool,
        /// The previous owner died while a turn ran there (`turn_started_at` was set).
        interrupted: bool,
    },
    /// A live node owns it.
    Held {
        /// The owner's node id.
        node: String,
    },
}

/// A lease left behind: expired while a turn ran, or with work waiting for its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The workstream.
    pub workstream: String,
}

/// Work waiting for a workstream's owner.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Handoff {
    /// Row id (what the owner is woken with).
    pub id: i64,
    /// The workstream.
    pub workstream: String,
    /// What to do there, as the channel layer wrote it (JSON).
    pub payload: String,
}

/// A `workstream_leases` row as [`Store::claim_lease`] reads it.
#[derive(sqlx::FromRow)]
struct LeaseRow {
    /// The owner.
    node: String,
    expires_at: i64,
    /// The turn mark: set while a turn runs.
    turn_started_at: Option<i64>,
    /// 1 when the lease is dead by the database's clock.
    dead: i64,
}

/// How often [`Store::claim_lease`] re-reads after losing a race before giving up.
const CLAIM_ATTEMPTS: usize = 5;

impl Store {
    /// Takes (or keeps) the lease on `workstream` for `node` for `lease_ms` from now by the
    /// database's clock. Another node's lease counts as expired as [`Liveness`] says.
    pub async fn claim_lease(
        &self,
        workstream: &str,
        node: &str,
        lease_ms: i64,
        liveness: Liveness,
    ) -> Result<Claim, StoreError> {
        let now = db_now(self.backend());
        let dead_before = liveness.dead_before(self.backend());
        let select = format!(
            "SELECT node, expires_at, turn_started_at, CAST(CASE WHEN expires_at < {dead_before} \
             THEN 1 ELSE 0 END AS BIGINT) AS dead FROM workstream_leases WHERE workstream = $1"
        );
        let insert = format!(
            "INSERT INTO workstream_leases (workstream, node, expires_at) \
             VALUES ($1, $2, {now} + $3) ON CONFLICT (workstream) DO NOTHING"
        );
        let keep = format!(
            "UPDATE workstream_leases SET expires_at = {now} + $1 \
             WHERE workstream = $2 AND node = $3"
        );
        // The expiry read is still the row's and still dead, both judged in the statement.
        let take = format!(
            "UPDATE workstream_leases SET node = $1, expires_at = {now} + $2, \
             turn_started_at = NULL \
             WHERE workstream = $3 AND node = $4 AND expires_at = $5 \
             AND expires_at < {dead_before}"
        );
        for _ in 0..CLAIM_ATTEMPTS {
            let row: Option<LeaseRow> = sqlx::query_as(AssertSqlSafe(select.as_str()))
                .bind(workstream)
                .fetch_optional(&self.pool)
                .await?;
            match row {
                None => {
                    let done = sqlx::query(AssertSqlSafe(insert.as_str()))
                        .bind(workstream)
                        .bind(node)
                        .bind(lease_ms)
                        .execute(&self.pool)
                        .await?;
                    if done.rows_affected() == 1 {
                        return Ok(Claim::Ours {
                            taken_over: false,
                            interrupted: false,
                        });
                    }
                }
                Some(LeaseRow { node: owner, .. }) if owner == node => {
                    sqlx::query(AssertSqlSafe(keep.as_str()))
                        .bind(lease_ms)
                        .bind(workstream)
                        .bind(node)
                        .execute(&self.pool)
                        .await?;
                    return Ok(Claim::Ours {
                        taken_over: false,
                        interrupted: false,
                    });
                }
                Some(LeaseRow {
                    node: owner,
                    expires_at: expiry,
                    turn_started_at: turn,
                    dead: 1,
                }) => {
                    let done = sqlx::query(AssertSqlSafe(take.as_str()))
                        .bind(node)
                        .bind(lease_ms)
                        .bind(workstream)
                        .bind(&owner)
                        .bind(expiry)
                        .execute(&self.pool)
                        .await?;
                    if done.rows_affected() == 1 {
                        tracing::info!(
                            workstream,
                            node,
                            previous = %owner,
                            interrupted = turn.is_some(),
                            "workstream taken over"
                        );
                        return Ok(Claim::Ours {
                            taken_over: true,
                            interrupted: turn.is_some(),
                        });
                    }
                }
                Some(LeaseRow { node: owner, .. }) => return Ok(Claim::Held { node: owner }),
            }
        }
        // Every attempt lost a race: someone keeps winning, so someone owns it.
        let owner = self.lease_owner(workstream).await?.unwrap_or_default();
        Ok(Claim::Held { node: owner })
    }

    /// The node holding `workstream`'s lease (expired or not), if any.
    pub async fn lease_owner(&self, workstream: &str) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT node FROM workstream_leases WHERE workstream = $1")
                .bind(workstream)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// The node whose lease on `workstream` is alive by the database's clock, running a turn
    /// or not; `None` when nobody's is.
    pub async fn live_lease_owner(&self, workstream: &str) -> Result<Option<String>, StoreError> {
        let sql = format!(
            "SELECT node FROM workstream_leases WHERE workstream = $1 AND expires_at >= {}",
            db_now(self.backend())
        );
        Ok(sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(workstream)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The node running a turn in `workstream` now: its lease is alive by the database's
    /// clock and a turn is marked. `None` when no live node runs one (a lease whose turn died
    /// with its node was taken over with the mark cleared).
    pub async fn turn_owner(&self, workstream: &str) -> Result<Option<String>, StoreError> {
        let sql = format!(
            "SELECT node FROM workstream_leases \
             WHERE workstream = $1 AND expires_at >= {} AND turn_started_at IS NOT NULL",
            db_now(self.backend())
        );
        Ok(sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(workstream)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The workstreams whose lease `node` holds.
    pub async fn leases_of(&self, node: &str) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT workstream FROM workstream_leases WHERE node = $1")
                .bind(node)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// Handoffs waiting for workstreams `node` holds that were left before `left_before`
    /// (unix ms): a wake-up lost while the bus reconnected, or work left for whoever owned the
    /// workstream next that no turn of its owner took. Oldest first.
    pub async fn handoffs_held_by(
        &self,
        node: &str,
        left_before: i64,
    ) -> Result<Vec<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT h.id FROM handoffs h JOIN workstream_leases l ON l.workstream = h.workstream \
             WHERE l.node = $1 AND h.created_at < $2 ORDER BY h.id",
        )
        .bind(node)
        .bind(left_before)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Renews every lease of `node` for `lease_ms` from now by the database's clock (one
    /// statement per heartbeat, however many workstreams it owns). Returns how many it holds.
    pub async fn renew_leases(&self, node: &str, lease_ms: i64) -> Result<u64, StoreError> {
        let sql = format!(
            "UPDATE workstream_leases SET expires_at = {} + $1 WHERE node = $2",
            db_now(self.backend())
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(lease_ms)
            .bind(node)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// Marks that a turn runs (`Some(started)`) or ended (`None`) in `workstream`, if `node`
    /// still owns it. False when it does not.
    pub async fn mark_turn(
        &self,
        workstream: &str,
        node: &str,
        started: Option<i64>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE workstream_leases SET turn_started_at = $1 WHERE workstream = $2 AND node = $3",
        )
        .bind(started)
        .bind(workstream)
        .bind(node)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// A clean stop of `node`: idle leases are dropped, and those with a turn running are
    /// expired at once, so another node takes them over (and marks the turn interrupted)
    /// without waiting.
    pub async fn release_leases(&self, node: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM workstream_leases WHERE node = $1 AND turn_started_at IS NULL")
            .bind(node)
            .execute(&self.pool)
            .await?;
        sqlx::query("UPDATE workstream_leases SET expires_at = 0 WHERE node = $1")
            .bind(node)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Drops every lease of `node` with no turn marked running (a stopping node that will
    /// start no more turns), so other nodes take those workstreams at once. Returns how many.
    pub async fn release_idle_leases(&self, node: &str) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM workstream_leases WHERE node = $1 AND turn_started_at IS NULL",
        )
        .bind(node)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Workstreams that a dead node left something in: a lease that expired (as
    /// [`Liveness`] judges) while a turn ran, or work waiting for an owner that is gone (or
    /// never was). At most `limit`, oldest first; `node`'s own are never orphans.
    pub async fn orphaned_leases(
        &self,
        node: &str,
        liveness: Liveness,
        limit: i64,
    ) -> Result<Vec<Orphan>, StoreError> {
        let dead_before = liveness.dead_before(self.backend());
        let sql = format!(
            "SELECT workstream FROM workstream_leases \
             WHERE node <> $1 AND expires_at < {dead_before} AND turn_started_at IS NOT NULL \
             UNION \
             SELECT h.workstream FROM handoffs h \
             LEFT JOIN workstream_leases l ON l.workstream = h.workstream \
             WHERE l.workstream IS NULL OR (l.node <> $1 AND l.expires_at < {dead_before}) \
             ORDER BY 1 LIMIT $2"
        );
        let rows: Vec<(String,)> = sqlx::query_as(AssertSqlSafe(sql))
            .bind(node)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(workstream,)| Orphan { workstream })
            .collect())
    }

    /// Leaves `payload` for `workstream`'s owner; returns the row id to wake it with.
    pub async fn push_handoff(
        &self,
        workstream: &str,
        payload: &str,
        now: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO handoffs (workstream, payload, created_at) VALUES ($1, $2, $3) \
             RETURNING id",
        )
        .bind(workstream)
        .bind(payload)
        .bind(now)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Takes handoff `id` (deleting it), if nobody took it yet.
    pub async fn take_handoff(&self, id: i64) -> Result<Option<Handoff>, StoreError> {
        Ok(
            sqlx::query_as("DELETE FROM handoffs WHERE id = $1 RETURNING id, workstream, payload")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// The workstream handoff `id` waits in; `None` once it was taken.
    pub async fn handoff_workstream(&self, id: i64) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT workstream FROM handoffs WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Every handoff waiting for `workstream`, oldest first (for the node that now owns it).
    /// Each is then taken with [`Store::take_handoff`], so two takers never both get one.
    pub async fn handoffs_for(&self, workstream: &str) -> Result<Vec<i64>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT id FROM handoffs WHERE workstream = $1 ORDER BY id")
                .bind(workstream)
                .fetch_all(&self.pool)
                .await?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const FRESH: Claim = Claim::Ours {
        taken_over: false,
        interrupted: false,
    };
    /// A lease that lasts through the test.
    const LIVE: i64 = 60_000;
    /// A lease written already expired (as if its node stopped renewing long ago).
    const EXPIRED: i64 = -60_000;
    const SHARED: Liveness = Liveness::Shared;

    #[tokio::test]
    async fn one_owner_at_a_time_and_takeover_after_expiry() {
        let store = Store::memory().await.unwrap();
        assert_eq!(
            store.claim_lease("w", "a", LIVE, SHARED).await.unwrap(),
            FRESH
        );
        assert_eq!(
            store.claim_lease("w", "a", LIVE, SHARED).await.unwrap(),
            FRESH
        );
        assert_eq!(
            store.claim_lease("w", "b", LIVE, SHARED).await.unwrap(),
            Claim::Held { node: "a".into() }
        );
        assert!(store.mark_turn("w", "a", Some(120)).await.unwrap());
        assert!(!store.mark_turn("w", "b", Some(120)).await.unwrap());
        assert_eq!(store.turn_owner("w").await.unwrap().as_deref(), Some("a"));
        // a stops renewing: its last renewal has run out by the database's clock.
        assert_eq!(store.renew_leases("a", EXPIRED).await.unwrap(), 1);
        assert_eq!(store.turn_owner("w").await.unwrap(), None);
        assert_eq!(
            store.claim_lease("w", "b", LIVE, SHARED).await.unwrap(),
            Claim::Ours {
                taken_over: true,
                interrupted: true
            }
        );
        assert_eq!(store.lease_owner("w").await.unwrap().as_deref(), Some("b"));
        assert_eq!(
            store.claim_lease("w", "a", LIVE, SHARED).await.unwrap(),
            Claim::Held { node: "b".into() }
        );
        assert_eq!(store.renew_leases("b", LIVE).await.unwrap(), 1);
        // Taken over with no turn running: nobody runs one until b marks its own.
        assert_eq!(store.turn_owner("w").await.unwrap(), None);
        assert!(store.mark_turn("w", "b", Some(700)).await.unwrap());
        assert_eq!(store.turn_owner("w").await.unwrap().as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn expiry_is_the_databases_clock_plus_the_lease() {
        let store = Store::memory().await.unwrap();
        store.claim_lease("w", "a", LIVE, SHARED).await.unwrap();
        let (expires, db_now): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT expires_at, {} FROM workstream_leases",
            db_now(store.backend())
        )))
        .fetch_one(store.pool())
        .await
        .unwrap();
        let left = expires - db_now;
        assert!((LIVE - 5_000..=LIVE).contains(&left), "{left}");
        // Where this node is alone, any other node's lease is dead, live or not.
        assert_eq!(
            store
                .claim_lease("w", "b", LIVE, Liveness::Alone)
                .await
                .unwrap(),
            Claim::Ours {
                taken_over: true,
                interrupted: false
            }
        );
    }

    #[tokio::test]
    async fn a_clean_stop_drops_idle_leases_and_expires_running_ones() {
        let store = Store::memory().await.unwrap();
        store.claim_lease("idle", "a", LIVE, SHARED).await.unwrap();
        store.claim_lease("busy", "a", LIVE, SHARED).await.unwrap();
        store.mark_turn("busy", "a", Some(5)).await.unwrap();
        store.release_leases("a").await.unwrap();
        assert_eq!(store.lease_owner("idle").await.unwrap(), None);
        let orphans = store.orphaned_leases("b", SHARED, 10).await.unwrap();
        assert_eq!(
            orphans,
            vec![Orphan {
                workstream: "busy".into()
            }]
        );
        assert_eq!(
            store.claim_lease("busy", "b", LIVE, SHARED).await.unwrap(),
            Claim::Ours {
                taken_over: true,
                interrupted: true
            }
        );
        assert!(
            store
                .orphaned_leases("c", SHARED, 10)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn handoffs_are_taken_once_and_orphaned_with_their_owner() {
        let store = Store::memory().await.unwrap();
        store.claim_lease("w", "a", LIVE, SHARED).await.unwrap();
        let first = store.push_handoff("w", "one", 1).await.unwrap();
        let second = store.push_handoff("w", "two", 2).await.unwrap();
        assert_eq!(store.handoffs_for("w").await.unwrap(), vec![first, second]);
        // While a lives its handoffs are no orphans; once it is dead they are.
        assert!(
            store
                .orphaned_leases("b", SHARED, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            store
                .orphaned_leases("b", Liveness::Alone, 10)
                .await
                .unwrap()
                .len(),
            1
        );
        store.renew_leases("a", EXPIRED).await.unwrap();
        assert_eq!(
            store.orphaned_leases("b", SHARED, 10).await.unwrap().len(),
            1
        );
        let taken = store.take_handoff(first).await.unwrap().unwrap();
        assert_eq!(
            (taken.workstream.as_str(), taken.payload.as_str()),
            ("w", "one")
        );
        assert_eq!(store.take_handoff(first).await.unwrap(), None);
        // Work for a workstream nobody owns is an orphan at once.
        store.renew_leases("a", LIVE).await.unwrap();
        store.push_handoff("nobody", "x", 3).await.unwrap();
        let orphans = store.orphaned_leases("b", SHARED, 10).await.unwrap();
        assert_eq!(
            orphans,
            vec![Orphan {
                workstream: "nobody".into()
            }]
        );
    }
}
