//! The retention timer: checks every open session's output limits (see [`crate::sessions::retain`]).

use crate::kernel::Kernel;
use crate::output::retention::config;
use crate::output::retention::Retention;
use crate::sessions::retain::{enforce, enforce_disk};
use std::sync::Weak;
use std::time::{Duration, Instant};

/// How often the timer checks ages: a quarter of the age, between 100 ms and a minute.
pub fn timer_period(r: Retention) -> Duration {
    (r.max_age / 4).clamp(Duration::from_millis(100), Duration::from_secs(60))
}

/// Check every open session's limits every [`timer_period`] until the kernel is gone.
/// Also woken by the output path once a 32nd of the disk budget was written since the last check
/// (see [`crate::output::retention::wrote`]): then the server's disk budget is enforced too.
pub fn start_timer(kernel: Weak<Kernel>) -> std::io::Result<()> {
    let period = timer_period(config());
    let wake = crate::output::retention::wake_channel();
    std::thread::Builder::new().name("retention".into()).spawn(move || loop {
        match &wake {
            Some(rx) => match rx.recv_timeout(period) {
                Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(period),
            },
            None => std::thread::sleep(period),
        }
        let Some(k) = kernel.upgrade() else { return };
        crate::output::retention::take_written();
        let sessions = k.open_sessions();
        let totals: Vec<u64> = sessions.iter().map(|s| enforce(&mut s.lock(), config(), Instant::now())).collect();
        enforce_disk(&totals, |i| sessions.get(i).map(|s| s.lock()), config().disk_bytes);
    })?;
    Ok(())
}
