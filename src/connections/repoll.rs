//! A future that answers a wake-up from inside its own poll by polling
//! again at once, instead of passing it to tokio.
//!
//! hyper wakes a connection's task from inside its own poll on every
//! request with a body (the body's receiver signals the dispatcher that it
//! wants data, and the dispatcher is the same task). tokio reschedules a
//! task woken during its poll through its yield path, and that path rouses
//! an idle worker to steal it: on a two-core machine every such request
//! then costs a cross-CPU wake-up and a futex round trip on the other
//! worker, about a third of a one-client append's CPU (docs/benchmarks.md,
//! "Issue 36, fifth pass"). Polling again here does what tokio would have
//! done, on the same thread, without the detour.
//!
//! Hand-written: neither tokio, futures nor hyper offer this. A wake from
//! elsewhere (another task, the I/O driver, the SQLite writer) while the
//! future is not being polled goes to the task's own waker as usual.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering::AcqRel, Ordering::Acquire, Ordering::Release};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Polls in a row for wake-ups from inside the poll before the task is
/// handed back to tokio: a future woken over and over (tokio's cooperative
/// budget spent, say) must still let others run.
const REPOLLS: usize = 4;

/// Not being polled: a wake-up goes to the task.
const IDLE: u8 = 0;
/// Being polled: a wake-up is noted.
const POLLING: u8 = 1;
/// Being polled and woken meanwhile: it is polled again.
const WOKEN: u8 = 2;

/// `F` wrapped; `Unpin`, as the connection's watch is (it holds its
/// futures pinned elsewhere).
pub struct Repoll<F> {
    inner: F,
    signal: Arc<Signal>,
    waker: Waker,
}

struct Signal {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self.state.compare_exchange(POLLING, WOKEN, AcqRel, Acquire) {
            // Noted: the poll in progress polls again.
            Ok(_) => {}
            Err(IDLE) => self.task.wake(),
            // Already noted.
            Err(_) => {}
        }
    }
}

impl<F: Future + Unpin> Repoll<F> {
    pub fn new(inner: F) -> Repoll<F> {
        let signal = Arc::new(Signal {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        Repoll {
            inner,
            waker: Waker::from(signal.clone()),
            signal,
        }
    }
}

impl<F: Future + Unpin> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Registered before the poll: a wake-up from elsewhere after the
        // poll finds the task's current waker.
        this.signal.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..REPOLLS {
            this.signal.state.store(POLLING, Release);
            if let Poll::Ready(output) = Pin::new(&mut this.inner).poll(&mut inner_cx) {
                this.signal.state.store(IDLE, Release);
                return Poll::Ready(output);
            }
            if this
                .signal
                .state
                .compare_exchange(POLLING, IDLE, AcqRel, Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
        }
        // Still woken after `REPOLLS` polls: let tokio schedule it again.
        this.signal.state.store(IDLE, Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::SeqCst;

    /// A future that wakes itself from inside its poll `times` times
    /// before it is ready, counting its polls.
    struct SelfWaking {
        times: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, SeqCst);
            if self.times == 0 {
                return Poll::Ready(());
            }
            self.times -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wake-ups that reach the task.
    struct Counting(AtomicUsize);
    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn wake_ups_from_inside_the_poll_are_answered_by_polling_again() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut future = std::pin::pin!(Repoll::new(SelfWaking {
            times: REPOLLS - 1,
            polls: polls.clone(),
        }));
        let task = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(future.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(SeqCst), REPOLLS);
        assert_eq!(task.0.load(SeqCst), 0, "no wake-up reached the task");
    }

    #[test]
    fn a_future_that_keeps_waking_itself_is_handed_back_to_the_task() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut future = std::pin::pin!(Repoll::new(SelfWaking {
            times: REPOLLS + 1,
            polls: polls.clone(),
        }));
        let task = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(SeqCst), REPOLLS);
        assert_eq!(task.0.load(SeqCst), 1, "the task was woken to poll again");
        assert!(future.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(SeqCst), REPOLLS + 2);
    }

    #[test]
    fn a_wake_up_from_elsewhere_reaches_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut future = std::pin::pin!(Repoll::new(rx));
        let task = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(future.as_mut().poll(&mut cx).is_pending());
        std::thread::spawn(move || tx.send(()).unwrap())
            .join()
            .unwrap();
        assert_eq!(task.0.load(SeqCst), 1);
        assert!(future.as_mut().poll(&mut cx).is_ready());
    }
}
