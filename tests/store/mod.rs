//! The store's conformance suite, as River's `riverdrivertest`: each operation of the
//! driver contract run on every backend. The worker side (`Work`: claim, complete, fail,
//! give back, extend) directly through `sk_runtime::__driver` (`work`); the admin side
//! (`Admin`, `Control`: pauses, limits, counts, peek, counts by group, bulk filters,
//! error groups, stored schedules, migrations) through `Client`, `QueueInfo`,
//! `StoredSchedules` and `sk_runtime::migrations`, its only callers, with a manual clock
//! and leases taken directly (`admin`). Beside them, the behaviour tests reach the same
//! operations through a worker. A module of the `queue` test binary.

mod admin;
mod work;
