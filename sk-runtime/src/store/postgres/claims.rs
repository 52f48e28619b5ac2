//! The claim's variants, each made from `claim` (`Statements::new`) by replacing a piece
//! of it, so they lock and return the same rows in the same way.

use super::sql::Statements;
use super::Schema;

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
