//! Timers for streams: retry delays and `fallback_timeout_ms`.
//!
//! The dynamic-modules ABI has no per-stream timer, but a stream's scheduler may be committed
//! from any thread and runs `on_http_filter_scheduled` on the stream's worker. So one thread
//! of this module sleeps until the earliest timer is due and commits its token to the
//! stream's scheduler; the hook hands the token to the stream's flight. A timer whose stream
//! ended meanwhile finds its scheduler gone and does nothing.

use super::ffi::{Api, SchedulerPtr};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, LazyLock, Mutex, PoisonError};
use std::time::Duration;

/// A stream's scheduler, shared by the stream and its pending timers; emptied (and the
/// scheduler deleted) when the stream ends, under the same lock a timer commits under, so a
/// commit never reaches a deleted scheduler.
pub struct Wake {
    api: &'static Api,
    scheduler: Mutex<Option<Scheduler>>,
}

/// Envoy's scheduler pointer, which Envoy allows to be committed from any thread.
struct Scheduler(SchedulerPtr);

// SAFETY: Envoy documents `http_filter_scheduler_commit` as safe from any thread; the pointer
// is only used under `Wake::scheduler`'s lock.
unsafe impl Send for Scheduler {}

impl Wake {
    /// A wake for a scheduler made with `Stream::new_scheduler`.
    pub fn new(api: &'static Api, scheduler: SchedulerPtr) -> Arc<Wake> {
        Arc::new(Wake {
            api,
            scheduler: Mutex::new(Some(Scheduler(scheduler))),
        })
    }

    /// Posts `token` to the stream, if it is still there.
    fn fire(&self, token: u64) {
        let held = self
            .scheduler
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = held.as_ref() {
            // SAFETY: the scheduler is alive while it is in `held` (see `close`).
            unsafe { (self.api.http_filter_scheduler_commit)(s.0, token) };
        }
    }

    /// The stream ended: deletes its scheduler; pending timers then do nothing.
    pub fn close(&self) {
        let taken = self
            .scheduler
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(s) = taken {
            // SAFETY: made by `http_filter_scheduler_new`, deleted once (it was taken).
            unsafe { (self.api.http_filter_scheduler_delete)(s.0) };
        }
    }
}

/// A pending timer.
struct Due {
    due_ms: u64,
    /// Insertion order, so equal due times fire in order and no `Ord` on `Wake` is needed.
    seq: u64,
    token: u64,
    wake: Arc<Wake>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.due_ms, self.seq) == (other.due_ms, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due_ms, self.seq).cmp(&(other.due_ms, other.seq))
    }
}

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Reverse<Due>>,
    next_seq: u64,
    running: bool,
}

static QUEUE: LazyLock<(Mutex<Queue>, Condvar)> =
    LazyLock::new(|| (Mutex::new(Queue::default()), Condvar::new()));

/// Posts `token` to `wake`'s stream at `due_ms` (milliseconds since the Unix epoch).
pub fn arm(wake: &Arc<Wake>, due_ms: u64, token: u64) {
    let (lock, ready) = &*QUEUE;
    let mut q = lock.lock().unwrap_or_else(PoisonError::into_inner);
    let seq = q.next_seq;
    q.next_seq = seq.wrapping_add(1);
    q.heap.push(Reverse(Due {
        due_ms,
        seq,
        token,
        wake: Arc::clone(wake),
    }));
    if !q.running {
        q.running = std::thread::Builder::new()
            .name("switchboard-timers".into())
            .spawn(run)
            .is_ok();
        if !q.running {
            log::error!("could not start the timer thread: retry delays and timeouts wait");
        }
    }
    ready.notify_one();
}

/// The timer thread: fires each timer when due, sleeping until the next one.
fn run() {
    let (lock, ready) = &*QUEUE;
    let mut q = lock.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let now = super::now_ms();
        let wait = match q.heap.peek() {
            Some(Reverse(next)) if next.due_ms <= now => {
                if let Some(Reverse(due)) = q.heap.pop() {
                    // Fire without the queue's lock: a commit takes the stream's lock only.
                    drop(q);
                    due.wake.fire(due.token);
                    q = lock.lock().unwrap_or_else(PoisonError::into_inner);
                }
                continue;
            }
            Some(Reverse(next)) => Duration::from_millis(next.due_ms - now),
            // Nothing pending: sleep until a timer is armed.
            None => Duration::from_secs(3600),
        };
        q = ready
            .wait_timeout(q, wait)
            .map_or_else(|e| e.into_inner().0, |(guard, _)| guard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{c_void, CStr};

    /// Tokens committed by the fake Envoy, with the scheduler they went to.
    static FIRED: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());
    static DELETED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

    extern "C" fn commit(scheduler: SchedulerPtr, token: u64) {
        FIRED.lock().unwrap().push((scheduler as usize, token));
    }
    extern "C" fn delete(scheduler: SchedulerPtr) {
        DELETED.lock().unwrap().push(scheduler as usize);
    }
    extern "C" fn never_called() {}

    fn fake_api() -> &'static Api {
        let api = Api::resolve(|name: &CStr| match name.to_bytes() {
            b"envoy_dynamic_module_callback_http_filter_scheduler_commit" => commit as *mut c_void,
            b"envoy_dynamic_module_callback_http_filter_scheduler_delete" => delete as *mut c_void,
            _ => never_called as *mut c_void,
        });
        Box::leak(Box::new(api.unwrap_or_else(|m| panic!("{m}"))))
    }

    fn fired_to(scheduler: usize) -> Vec<u64> {
        let fired = FIRED.lock().unwrap();
        fired
            .iter()
            .filter(|(s, _)| *s == scheduler)
            .map(|(_, t)| *t)
            .collect()
    }

    #[test]
    fn timers_fire_in_due_order_and_not_after_their_stream_ends() {
        let api = fake_api();
        let (live, gone) = (0x1000usize, 0x2000usize);
        let a = Wake::new(api, live as SchedulerPtr);
        let b = Wake::new(api, gone as SchedulerPtr);
        let now = crate::native::now_ms();
        arm(&a, now + 60, 3);
        arm(&a, now + 20, 1);
        arm(&a, now + 40, 2);
        arm(&b, now + 40, 9);
        b.close();
        b.close(); // a second close deletes nothing more
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while fired_to(live).len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(fired_to(live), vec![1, 2, 3]);
        assert!(
            fired_to(gone).is_empty(),
            "a closed stream's timer must not commit"
        );
        assert_eq!(
            DELETED
                .lock()
                .unwrap()
                .iter()
                .filter(|s| **s == gone)
                .count(),
            1
        );
        assert!(
            crate::native::now_ms() >= now + 60,
            "the last timer waited its 60 ms"
        );
    }
}
