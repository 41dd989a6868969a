//! Each simulated process of the replay on a thread of its own, as
//! Autobuild's dashboards, dispatchers and runners are separate processes,
//! each with its own event loop.
//!
//! On one shared runtime thread a dashboard decoding and parsing a large
//! answer (tens of milliseconds on a week-old store) held every other
//! simulated process's answers unread meanwhile, so a runner's append was
//! timed with the load generator's own parsing in it.
//!
//! The read load (dashboards, dispatchers) runs at a lower priority
//! ([`NICE`]) than the server and the runners whose writes are timed: on
//! this two-core machine those clients share the server's cores, where
//! Autobuild's dashboards run in browsers on other machines. Without it a
//! dashboard's parsing took the core a server thread was about to run on,
//! and a write waited milliseconds to be scheduled. The runners keep the
//! server's priority: lowered too, their own wait for a core would be timed
//! as the append's.

use std::future::Future;
use std::thread::JoinHandle;

use tokio::sync::oneshot;
use tokio::task::JoinSet;

/// The threads of one run's simulated processes.
#[derive(Default)]
pub struct ProcessThreads {
    running: Vec<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl ProcessThreads {
    /// Run `process` on a new thread with its own single-threaded runtime,
    /// joinable and abortable through `tasks`, at `priority`.
    pub fn spawn(
        &mut self,
        tasks: &mut JoinSet<()>,
        priority: Priority,
        process: impl Future<Output = ()> + Send + 'static,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for a simulated process");
        tasks.spawn_on(process, runtime.handle());
        let (stop, stopped) = oneshot::channel();
        // The runtime keeps turning until told to stop, so the tasks'
        // aborts at the end of the run are carried out on it.
        let thread = std::thread::spawn(move || {
            if priority == Priority::Load {
                lower_priority();
            }
            runtime.block_on(async {
                let _ = stopped.await;
            });
        });
        self.running.push((stop, thread));
    }

    /// Stop every thread; call once their tasks have been joined.
    pub fn stop(self) {
        for (stop, thread) in self.running {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }
}

/// Which simulated processes yield their cores (the module doc says why).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// The read load, at [`NICE`].
    Load,
    /// The writers whose latencies are reported, at the server's priority.
    Timed,
}

/// The read load's nice value; the server and the runners keep the default 0.
pub const NICE: i32 = 10;

/// Lower this thread's priority to [`NICE`]. On Linux a thread id names
/// one thread, not its process; failing only costs the measurement's
/// quiet, so it is reported, not fatal.
fn lower_priority() {
    let thread = rustix::thread::gettid();
    if let Err(err) = rustix::process::setpriority_process(Some(thread), NICE) {
        eprintln!("autobuild: could not lower a simulated process's priority: {err}");
    }
}
