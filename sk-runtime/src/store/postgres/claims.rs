//! The claim's variants, each made from `claim` (`Statements::new`) by replacing a piece
//! of it, so they lock and return the same rows in the same way, and the steps of a fair
//! claim or a claim under limits per tenant (`fair::Steps`) that run them.

use sqlx::{PgConnection, Postgres};

use super::sql::Statements;
use super::work::claimed;
use super::{fair, ClaimedJob, PgStore, Schema};
use crate::error::{Error, Result};

impl Statements {
    /// `claim_fair`: the claim of one fair queue (`$3`'s one queue), up to `$4` due jobs
    /// of each tenant of `$8`, each tenant's through the fair index in the claim's order
    /// (migration 19).
    pub(super) fn with_claim_fair(mut self, q: &str, due: &str) -> Self {
        let fair = format!(
            "SELECT f.task_id FROM unnest($8::varchar[]) AS k(tenant)
             CROSS JOIN LATERAL (
                SELECT task_id FROM {q}
                WHERE task_queue = ($3::varchar[])[1] AND task_tenant COLLATE \"C\" = k.tenant
                  AND task_locked_until_ts <= $1 AND task_type = ANY($2)
                  AND ($7::varchar[] IS NULL OR task_tenant = ANY($7))
                ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id
                LIMIT $4
                FOR UPDATE SKIP LOCKED) f"
        );
        self.claim_fair = self.claim.replace(due, &fair);
        self
    }

    pub(super) fn with_claim_skipping(mut self) -> Self {
        self.claim_skipping = self
            .claim
            .replace("AND true -- paused", "AND task_queue <> ALL($8)");
        self
    }

    pub(super) fn with_claim_capped(mut self, schema: &Schema) -> Self {
        let room = schema.table("queue_room");
        self.claim_capped = self.claim.replace(
            "LIMIT $4",
            &format!("LIMIT least($4, coalesce({room}($8, $1), $4))"),
        );
        self
    }

    /// `claim_untenanted`: `claim` of the jobs without a tenant, what a claim of a queue
    /// with a limit per tenant takes after each tenant's (`fair::claim_within`).
    pub(super) fn with_claim_untenanted(mut self) -> Self {
        self.claim_untenanted = self.claim.replace(
            "AND ($7::varchar[] IS NULL OR task_tenant = ANY($7))",
            "AND task_tenant IS NULL",
        );
        self
    }
}

impl fair::Steps for PgStore {
    type Conn = PgConnection;
    type Job = ClaimedJob;

    fair::dialect_steps!(Postgres);

    fn mend(&self, error: Error) -> Error {
        self.lost_in(error)
    }

    /// Through the fair index, one statement for every tenant (`claim_fair`).
    async fn take(
        &self,
        conn: &mut PgConnection,
        claim: &super::super::Claim<'_>,
        keys: &[String],
        each: i64,
    ) -> Result<Vec<ClaimedJob>> {
        let each = super::super::Claim {
            limit: each,
            ..*claim
        };
        let rows = self
            .claim_query(&self.schema.sql.claim_fair, &each)
            .bind(keys)
            .fetch_all(self.on(conn))
            .await
            .map_err(|e| self.lost(e))?;
        Ok(claimed(&rows))
    }

    /// `claim` (or `claim_skipping`, with paused queues; `claim_untenanted`).
    async fn rest(
        &self,
        conn: &mut PgConnection,
        claim: &super::super::Claim<'_>,
        limit: i64,
    ) -> Result<Vec<ClaimedJob>> {
        let claim = super::super::Claim { limit, ..*claim };
        let sql = &self.schema.sql;
        let query = if claim.untenanted {
            self.claim_query(&sql.claim_untenanted, &claim)
        } else if claim.paused.is_empty() {
            self.claim_query(&sql.claim, &claim)
        } else {
            self.claim_query(&sql.claim_skipping, &claim)
                .bind(claim.paused)
        };
        let rows = query
            .fetch_all(self.on(conn))
            .await
            .map_err(|e| self.lost(e))?;
        Ok(claimed(&rows))
    }
}
