//! The retention timer: checks every open session's output limits (see [`crate::sessions::retain`]).

use crate::kernel::Kernel;
use crate::output::retention::config;
use crate::output::retention::Retention;
use crate::sessions::retain::enforce;
use std::sync::Weak;
use std::time::{Duration, Instant};

/// How often the timer checks ages: a quarter of the age, between 100 ms and a minute.
pub fn timer_period(r: Retention) -> Duration {
    (r.max_age / 4).clamp(Duration::from_millis(100), Duration::from_secs(60))
}

/// Check every open session's limits every [`timer_period`] until the kernel is gone.
pub fn start_timer(kernel: Weak<Kernel>) -> std::io::Result<()> {
    let period = timer_period(config());
    std::thread::Builder::new().name("retention".into()).spawn(move || loop {
        std::thread::sleep(period);
        let Some(k) = kernel.upgrade() else { return };
        for s in k.open_sessions() {
            let mut st = s.lock();
            enforce(&mut st, config(), Instant::now());
        }
    })?;
    Ok(())
}
