//! The store's conformance suite, as River's `riverdrivertest`: each operation of the
//! driver contract's worker side (`Work`: claim, complete, fail, give back, extend) run
//! directly on every backend through `sk_runtime::__driver`, beside the behaviour tests
//! that reach it through a worker. The admin side (`Admin`, `Control`) is what `Client`
//! and `QueueInfo` call; its contract is tested through them (`control`, `seeds`). A
//! module of the `queue` test binary.

mod work;
