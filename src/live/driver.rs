//! The live run every recording tool shares: start the target, poll and drain the rings into
//! the session until a stop condition, then disable the events, drain what is left and read
//! what the kernel counted as lost. `record` feeds a perf.data writer, `leak` its table.

use std::ffi::OsString;
use std::io::{PipeReader, PipeWriter, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::drain::{self, DrainStats};
use super::open::Opened;
use super::resize::StackSizer;
use crate::config::record::Target;
use crate::procfs;
use crate::session::{Handler, Session};
use crate::sys::child::{CommandStdout, ExitStatusInfo, GatedChild, RunningChild};
use crate::sys::open::{ioc_disable, ioc_enable, read_lost};
use crate::sys::poll;
use crate::sys::ring::RingBuffer;

/// The longest wait between two drains.
const POLL_EVERY: Duration = Duration::from_millis(100);
/// How often the rings are looked at while a sample's stack may have to be finished from the
/// live process (see [`Driver::prompt`]). Every millisecond cost a system-wide recording of
/// a compile load half its CPU again in wake-ups (benches/system-gcc.sh: 1.80 s against
/// 1.18 s without prompt reading, 1.41 s at 3 ms), for a median delay a millisecond shorter.
const PROMPT_EVERY: Duration = Duration::from_millis(3);
/// The shortest time between two rounds of `--call-graph dwarf,auto`'s sizer: its twin
/// rounds (`live::resize`) must outlast the drain's hold-back, which rounds a millisecond
/// apart would not.
const SIZE_EVERY: Duration = Duration::from_millis(10);
/// How long the rings may hold nothing before prompt reading stops (until a round finds
/// records again): an idle target costs no wake-ups, and one sampled more often than
/// this keeps its stacks read within milliseconds.
const IDLE_AFTER: Duration = Duration::from_secs(1);
/// How often attached targets are checked for having exited.
const ALIVE_EVERY: Duration = Duration::from_millis(200);

/// How often the rings are read while stacks may need the live process (see
/// [`Driver::prompt`]): every [`PROMPT_EVERY`], or as `MEMPERF_PROMPT_READ_MS` says (for
/// benchmarks and tests; 0 reads them only when the watermark or the 100 ms timeout wakes
/// the reader, as before).
pub(crate) fn prompt_every() -> Option<Duration> {
    let every = std::env::var("MEMPERF_PROMPT_READ_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(PROMPT_EVERY, |ms| Duration::from_millis(ms.min(1000)));
    (!every.is_zero()).then_some(every)
}

/// Signals that end or shape a recording, set by handlers, read by the loop.
pub(crate) struct SignalState {
    interrupt: Arc<AtomicBool>,
    terminate: Arc<AtomicBool>,
    wake: PipeReader,
    _wake_tx: PipeWriter,
    /// The handlers, removed when the run ends (`stat -r` runs many in one process).
    ids: Vec<signal_hook::SigId>,
}

impl Drop for SignalState {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

impl SignalState {
    pub(crate) fn install() -> Result<SignalState> {
        // A pipe, not a Unix socket pair: a kernel built without networking (CONFIG_NET,
        // CONFIG_UNIX) has pipes, and answered socketpair(2) with ENOSYS, which ended every
        // live command (benches/kernels.sh's guests). Both ends non-blocking: the handler
        // must never block, and the drain reads until the pipe is empty.
        let (rx, tx) = std::io::pipe().context("failed to create the signal pipe")?;
        for end in [rx.as_fd(), tx.as_fd()] {
            crate::sys::set_nonblocking(end).context("failed to set up the signal pipe")?;
        }
        let interrupt = Arc::new(AtomicBool::new(false));
        let terminate = Arc::new(AtomicBool::new(false));
        let mut ids = Vec::new();
        for (sig, flag) in [
            (signal_hook::consts::SIGINT, &interrupt),
            (signal_hook::consts::SIGTERM, &terminate),
            (signal_hook::consts::SIGHUP, &terminate),
            // SIGQUIT's default (a core dump) and SIGPIPE's (ignored, as Rust sets it) would
            // leave the probes placed or the run going: both end it as SIGTERM does. A write
            // to a closed pipe raises SIGPIPE too, and ends the run as well.
            (signal_hook::consts::SIGQUIT, &terminate),
            (signal_hook::consts::SIGPIPE, &terminate),
        ] {
            ids.push(
                signal_hook::flag::register(sig, Arc::clone(flag))
                    .context("failed to install a signal handler")?,
            );
            let tx2 = tx.try_clone().context("failed to set up the signal pipe")?;
            ids.push(
                signal_hook::low_level::pipe::register(sig, tx2)
                    .context("failed to install a signal handler")?,
            );
        }
        let tx2 = tx.try_clone().context("failed to set up the signal pipe")?;
        ids.push(
            signal_hook::low_level::pipe::register(signal_hook::consts::SIGCHLD, tx2)
                .context("failed to install a signal handler")?,
        );
        Ok(SignalState {
            ids,
            interrupt,
            terminate,
            wake: rx,
            _wake_tx: tx,
        })
    }

    fn drain_wakeups(&mut self) {
        let mut buf = [0u8; 64];
        while matches!(self.wake.read(&mut buf), Ok(n) if n > 0) {}
    }

    /// The signal received since the last call, if any.
    fn take(&self) -> Option<i32> {
        if self.interrupt.swap(false, Ordering::SeqCst) {
            Some(libc::SIGINT)
        } else if self.terminate.swap(false, Ordering::SeqCst) {
            Some(libc::SIGTERM)
        } else {
            None
        }
    }
}

/// Starts the command, if there is one, held before its exec so that its events can be
/// opened on its pid first. When its standard output is sent to memperf's standard error
/// (memperf's carries data), a line on standard error says so, once.
pub(crate) fn spawn_gated(
    command: Option<&[OsString]>,
    stdout: CommandStdout,
) -> Result<Option<GatedChild>> {
    let Some(argv) = command else {
        return Ok(None);
    };
    if stdout == CommandStdout::Stderr {
        eprintln!(
            "memperf: the command's standard output goes to standard error: memperf's \
             standard output carries the data"
        );
    }
    GatedChild::spawn(argv, stdout)
        .context("failed to start the command")
        .map(Some)
}

/// Fails, as perf does, when a pid given to -p does not exist.
pub(crate) fn check_attach(target: &Target) -> Result<()> {
    if let Target::Pids(pids) = target {
        for &pid in pids {
            if !procfs::exists(pid) {
                anyhow::bail!("no such process: {pid} (given to -p)");
            }
        }
    }
    Ok(())
}

/// Why the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    CommandExited,
    TargetsExited,
    Duration,
    Signal(i32),
    /// The tool's own round handler asked to stop (leak's report count).
    Requested,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::CommandExited => f.write_str("the command exited"),
            StopReason::TargetsExited => f.write_str("every target exited"),
            StopReason::Duration => f.write_str("--duration elapsed"),
            StopReason::Signal(libc::SIGINT) => f.write_str("interrupted (SIGINT)"),
            StopReason::Signal(s) => write!(f, "signal {s}"),
            StopReason::Requested => f.write_str("the tool's end condition was met"),
        }
    }
}

/// What SIGINT, SIGTERM or SIGHUP does while a command runs (without one, it stops the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnSignal {
    /// Forward it to the command and keep draining until the command exits.
    Forward,
    /// Forward it to the command and stop at once.
    ForwardAndStop,
}

/// The stop conditions of `Driver::run_until`, besides the targets exiting.
pub(crate) struct Until {
    /// Stop after this long (a command is sent SIGTERM and waited for).
    pub duration: Option<Duration>,
    /// How often a round is marked as a tick, for periodic output.
    pub tick: Option<Duration>,
    pub on_signal: OnSignal,
}

/// What one drain round did, as the round handler sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Round {
    /// Records taken from the rings in this round.
    pub drained: u64,
    /// Whether a `tick` interval ended with this round.
    pub tick: bool,
    /// The sample clock when the round began: every record stamped up to two milliseconds
    /// before it has been handed on (`None` when the clock cannot be read).
    pub now: Option<u64>,
    /// This round's number (1 and up), and the last round whose records are all handed on:
    /// every record the kernel committed before that round began (`drain::Passed`).
    pub number: u64,
    pub passed: u64,
}

/// The round handler's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Stop,
}

/// How the run ended, from `Driver::finish`.
pub(crate) struct Finished {
    pub reason: StopReason,
    /// The command's exit status, when the run waited for it.
    pub exit: Option<ExitStatusInfo>,
    /// The events' PERF_FORMAT_LOST total (when the kernel has it and records were read):
    /// it includes losses no LOST record reported.
    pub kernel_lost: Option<u64>,
    pub drain: DrainStats,
    /// The sample clock after the last drain.
    pub now: Option<u64>,
    /// The events, still open: the caller decides when they close.
    pub opened: Opened,
}

/// The opened events and their target, from start to the last drain.
pub(crate) struct Driver {
    opened: Opened,
    signals: SignalState,
    gated: Option<GatedChild>,
    child: ChildGuard,
    target: Target,
    discard: bool,
    sink_context: Option<String>,
    stats: DrainStats,
    /// Which rounds have handed on every record the rings held when they began.
    passed: drain::Passed,
    reason: StopReason,
    exit: Option<ExitStatusInfo>,
    /// `--call-graph dwarf,auto`'s sizing, told after a drain round (at most every
    /// [`SIZE_EVERY`] when the rings are read promptly).
    sizer: Option<StackSizer>,
    /// How often the rings are looked at, when more often than the watermark wakes the
    /// reader (see [`Driver::prompt`]).
    prompt: Option<Duration>,
}

impl Driver {
    /// A driver for events opened on `target` (on `gated`'s pid for a command).
    pub(crate) fn new(
        opened: Opened,
        signals: SignalState,
        gated: Option<GatedChild>,
        target: &Target,
    ) -> Driver {
        Driver {
            opened,
            signals,
            gated,
            child: ChildGuard(None),
            target: target.clone(),
            discard: false,
            sink_context: None,
            stats: DrainStats::default(),
            passed: drain::Passed::default(),
            reason: StopReason::Requested,
            exit: None,
            sizer: None,
            prompt: None,
        }
    }

    /// Reads the rings within `every` of a record being written, not only when the
    /// watermark or the 100 ms timeout wakes the reader: the drain looks at each ring's
    /// `data_head` that often (no system call) and runs a round when one holds records.
    /// The recorder asks for it while unwinding DWARF stacks with the live process at hand:
    /// a stack past its copy is finished from the thread's memory, true only while the
    /// thread is still in the frames sampled.
    pub(crate) fn prompt(mut self, every: Option<Duration>) -> Driver {
        self.prompt = every;
        self
    }

    /// Sizes the DWARF events' stack copy while recording (`--call-graph dwarf,auto`).
    pub(crate) fn with_sizer(mut self, sizer: Option<StackSizer>) -> Driver {
        self.sizer = sizer;
        self
    }

    /// Advances the rings without reading the records (a benchmark aid); losses are then
    /// not counted either.
    pub(crate) fn discard(mut self, yes: bool) -> Driver {
        self.discard = yes;
        self
    }

    /// The context given to errors of the sink while draining (e.g. which file failed).
    pub(crate) fn sink_context(mut self, what: String) -> Driver {
        self.sink_context = Some(what);
        self
    }

    /// The sample clock now.
    pub(crate) fn clock_now(&mut self) -> Option<u64> {
        self.opened.clock.now()
    }

    pub(crate) fn opened(&self) -> &Opened {
        &self.opened
    }

    pub(crate) fn child_pid(&self) -> Option<i32> {
        let gated = self.gated.as_ref().map(|g| g.pid());
        gated.or(self.child.as_ref().map(|c| c.pid()))
    }

    /// Enables the events (a command's enable themselves at its exec).
    pub(crate) fn enable(&mut self) -> Result<()> {
        if self.target != Target::Command {
            for fd in self.event_fds() {
                ioc_enable(fd).context("failed to enable an event")?;
            }
        }
        Ok(())
    }

    /// Lets the command run.
    pub(crate) fn release(&mut self) -> Result<()> {
        if let Some(g) = self.gated.take() {
            *self.child = Some(g.release().context("failed to start the command")?);
        }
        Ok(())
    }

    /// Sends `sig` to the command, if there is one.
    pub(crate) fn signal_child(&self, sig: i32) {
        if let Some(c) = &*self.child {
            let _ = c.kill(sig);
        }
    }

    /// Polls and drains the rings into `session` and `sink`, calling `on_round` after each
    /// round, until a signal, the targets exiting, `until`, or `on_round` ends the run.
    pub(crate) fn run_until<S: Handler>(
        &mut self,
        session: &mut Session,
        sink: &mut S,
        until: &Until,
        mut on_round: impl FnMut(&mut Session, &mut S, Round) -> Result<Flow>,
    ) -> Result<StopReason> {
        let deadline = until.duration.map(|d| Instant::now() + d);
        let mut next_tick = until.tick.map(|t| Instant::now() + t);
        let mut hung_up = vec![false; self.opened.rings.len()];
        let mut last_alive_check = Instant::now();
        let mut pace = Pace::new(self.prompt);
        let (reason, exit) = loop {
            let timeout = [deadline, next_tick]
                .into_iter()
                .flatten()
                .map(|t| t.saturating_duration_since(Instant::now()))
                .fold(pace.wait(&self.opened.rings), Duration::min);
            let woke = self.poll(&mut hung_up, timeout)?;
            if woke {
                self.signals.drain_wakeups();
            }
            let tick = next_tick.is_some_and(|t| Instant::now() >= t);
            let due = tick || woke || deadline.is_some_and(|d| Instant::now() >= d);
            if !pace.round_now(due, &self.opened.rings) {
                continue;
            }
            let before = self.stats.records;
            let number = self.passed.begin_rings(&self.opened.rings);
            let now = self.opened.clock.now();
            session.set_clock(self.opened.clock.offset());
            let limit = now.map(|t| t.saturating_sub(drain::HOLD_BACK_NS));
            self.drain(session, sink, limit)?;
            let passed = self.passed.end_rings(&self.opened.rings);
            if let Some(sizer) = &mut self.sizer
                && pace.size_now()
            {
                sizer.round(&mut self.opened, session);
            }
            if tick {
                next_tick = until.tick.map(|t| Instant::now() + t);
            }
            let drained = self.stats.records - before;
            pace.last_drained = drained;
            let round = Round {
                drained,
                tick,
                now,
                number,
                passed,
            };
            if on_round(session, sink, round)? == Flow::Stop {
                break (StopReason::Requested, None);
            }
            if let Some(end) = self.ended(until, deadline, &mut last_alive_check)? {
                break end;
            }
        };
        self.reason = reason;
        self.exit = exit;
        Ok(reason)
    }

    /// The stop condition met after a round, if any: a signal, the command exiting, the
    /// duration, or every attached target gone, exited whether reaped or not (checked every
    /// `ALIVE_EVERY`).
    fn ended(
        &mut self,
        until: &Until,
        deadline: Option<Instant>,
        last_alive_check: &mut Instant,
    ) -> Result<Option<(StopReason, Option<ExitStatusInfo>)>> {
        if let Some(sig) = self.signals.take() {
            self.signal_child(sig);
            if self.child.is_none() || until.on_signal == OnSignal::ForwardAndStop {
                return Ok(Some((StopReason::Signal(sig), None)));
            }
        }
        if let Some(c) = self.child.as_mut()
            && let Some(status) = c.try_wait().context("failed to wait for the command")?
        {
            return Ok(Some((StopReason::CommandExited, Some(status))));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let status = match self.child.as_mut() {
                Some(c) => {
                    let _ = c.kill(libc::SIGTERM);
                    Some(wait_blocking(c)?)
                }
                None => None,
            };
            return Ok(Some((StopReason::Duration, status)));
        }
        if last_alive_check.elapsed() >= ALIVE_EVERY {
            *last_alive_check = Instant::now();
            if self.targets_gone() {
                return Ok(Some((StopReason::TargetsExited, None)));
            }
        }
        Ok(None)
    }

    /// Waits for a signal or data; rings that hung up (their task exited) are left out, as
    /// they would end every wait at once. True when a signal came (or the command exited).
    fn poll(&self, hung_up: &mut [bool], timeout: Duration) -> Result<bool> {
        let mut fds: Vec<BorrowedFd<'_>> = vec![self.signals.wake.as_fd()];
        let mut which = Vec::new();
        for (i, ring) in self.opened.rings.iter().enumerate() {
            if !hung_up[i] {
                fds.push(ring.fd());
                which.push(i);
            }
        }
        let revents = poll::poll(&fds, timeout).context("failed to wait for events")?;
        for (k, &i) in which.iter().enumerate() {
            if revents[k + 1] & (libc::POLLHUP | libc::POLLERR) != 0 {
                hung_up[i] = true;
            }
        }
        Ok(revents.first().is_some_and(|&r| r != 0))
    }

    fn drain<S: Handler>(
        &mut self,
        session: &mut Session,
        sink: &mut S,
        limit: Option<u64>,
    ) -> Result<()> {
        if self.discard {
            drain::discard_round(&mut self.opened.rings, &mut self.stats);
            return Ok(());
        }
        let drained = drain::round(
            &mut self.opened.rings,
            &self.opened.ring_events,
            session,
            sink,
            limit,
            &mut self.stats,
        );
        self.in_sink(drained.map_err(anyhow::Error::from))
    }

    fn in_sink<T>(&self, r: Result<T>) -> Result<T> {
        match &self.sink_context {
            Some(what) => r.context(what.clone()),
            None => r,
        }
    }

    fn targets_gone(&self) -> bool {
        match &self.target {
            Target::Pids(p) => p.iter().all(|&pid| !procfs::is_running(pid)),
            Target::Tids(t) => t.iter().all(|&tid| !procfs::thread_running(tid)),
            _ => false,
        }
    }

    /// Every event fd: the ring owners and the others.
    fn event_fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.opened.open_fds()
    }

    fn kernel_lost(&self) -> Result<u64> {
        let mut counted = self.opened.retired_lost;
        for fd in self.event_fds() {
            counted += read_lost(fd).context("failed to read an event's lost count")?;
        }
        Ok(counted)
    }

    /// Disables every event, drains what is left and reads the kernel's loss counts.
    pub(crate) fn finish<S: Handler>(
        mut self,
        session: &mut Session,
        sink: &mut S,
    ) -> Result<Finished> {
        // The run reached its end: the command is left to the caller as it is.
        let _ = self.child.take();
        for fd in self.event_fds() {
            let _ = ioc_disable(fd);
        }
        self.drain(session, sink, None)?;
        let kernel_lost = if self.opened.format_lost && !self.discard {
            Some(self.in_sink(self.kernel_lost())?)
        } else {
            None
        };
        let now = self.opened.clock.now();
        if let Some(sizer) = &mut self.sizer {
            sizer.take_depths(session);
            let notes = sizer.notes(&self.opened, session);
            self.opened.notes.extend(notes);
        }
        Ok(Finished {
            now,
            reason: self.reason,
            exit: self.exit,
            kernel_lost,
            drain: self.stats,
            opened: self.opened,
        })
    }
}

/// The share of a ring that, still unread after a round, starts the next one at once when
/// reading promptly. A wait of [`PROMPT_EVERY`] there ends only at the watermark (a quarter):
/// on sqlite3 inserting rows, whose samples came faster than a round took, the reader slept
/// 1-3 ms of every 11 with 12 MiB unread, and its rounds began at the watermark.
const BACKLOG_SHARE: usize = 16;

/// Whether `ring` holds [`BACKLOG_SHARE`] of its size or more, unread.
fn backlogged(ring: &RingBuffer) -> bool {
    let (head, tail) = ring.positions();
    head.wrapping_sub(tail) >= (ring.data_size() / BACKLOG_SHARE) as u64
}

/// When the driver runs a drain round: at every wake-up, or, reading promptly (see
/// [`Driver::prompt`]), only at those that find a ring holding records or that something
/// else is due, and at least every [`POLL_EVERY`] (the handlers' rounds keep that pace).
struct Pace {
    prompt: Option<Duration>,
    last_round: Instant,
    /// When a ring was last found holding records: after [`IDLE_AFTER`] without, the waits
    /// are [`POLL_EVERY`] long again, until a round finds records.
    last_data: Instant,
    last_sized: Option<Instant>,
    /// The records the last round handed on.
    last_drained: u64,
}

impl Pace {
    fn new(prompt: Option<Duration>) -> Pace {
        let now = Instant::now();
        Pace {
            prompt,
            last_round: now,
            last_data: now,
            last_sized: None,
            last_drained: 0,
        }
    }

    /// The longest wait before the next look at the rings: none, reading promptly, while a
    /// ring still holds [`BACKLOG_SHARE`] of its size or more after a round that handed
    /// records on (one that handed on none would only find the records the drain holds
    /// back by their time again, and the loop would spin).
    fn wait(&self, rings: &[RingBuffer]) -> Duration {
        match self.prompt {
            Some(_) if self.last_drained > 0 && rings.iter().any(backlogged) => Duration::ZERO,
            Some(every) if self.last_data.elapsed() < IDLE_AFTER => every,
            _ => POLL_EVERY,
        }
    }

    /// Whether this wake-up runs a round (`due`: a tick, a signal or the deadline came).
    fn round_now(&mut self, due: bool, rings: &[RingBuffer]) -> bool {
        let mut now = due || self.prompt.is_none() || self.last_round.elapsed() >= POLL_EVERY;
        if self.prompt.is_some() && rings.iter().any(RingBuffer::has_data) {
            self.last_data = Instant::now();
            now = true;
        }
        if now {
            self.last_round = Instant::now();
        }
        now
    }

    /// Whether the sizer is told of this round: every round, or every [`SIZE_EVERY`] when
    /// reading promptly.
    fn size_now(&mut self) -> bool {
        let now =
            self.prompt.is_none() || self.last_sized.is_none_or(|t| t.elapsed() >= SIZE_EVERY);
        if now {
            self.last_sized = Some(Instant::now());
        }
        now
    }
}

/// The command memperf started, stopped if the run ends in an error (a full disk, a failed
/// read of the rings): perf stops its workload too, rather than leave it running without its
/// recorder under PID 1. A `-p` target is never memperf's child and never stopped.
struct ChildGuard(Option<RunningChild>);

impl std::ops::Deref for ChildGuard {
    type Target = Option<RunningChild>;
    fn deref(&self) -> &Option<RunningChild> {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Option<RunningChild> {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut()
            && let Ok(true) = c.stop(STOP_GRACE)
        {
            eprintln!(
                "memperf: stopped the command it started (pid {}): the recording could not go on",
                c.pid()
            );
        }
    }
}

/// How long a command stopped on an error has to exit after SIGTERM, before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

fn wait_blocking(c: &mut RunningChild) -> Result<ExitStatusInfo> {
    loop {
        if let Some(s) = c.try_wait().context("failed to wait for the command")? {
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A ring of one page holding the samples of `faults` page faults of this thread.
    fn ring_with_faults(faults: usize) -> Option<RingBuffer> {
        use crate::events::Period;
        use crate::sys::attr::{AttrConfig, build_attr};
        use crate::sys::open::{FeatureState, SysOpener, open_event};
        use perf_event_open_sys::bindings as b;

        if !crate::sys::testutil::require_perf("a software page-faults event") {
            return None;
        }
        let cfg = AttrConfig {
            type_: b::PERF_TYPE_SOFTWARE,
            config: u64::from(b::PERF_COUNT_SW_PAGE_FAULTS),
            period: Period::Count(1),
            sample_type: u64::from(b::PERF_SAMPLE_IP | b::PERF_SAMPLE_TID),
            ..AttrConfig::default()
        };
        let mut attr = build_attr(&cfg);
        let fd = open_event(&SysOpener, &mut attr, 0, -1, &mut FeatureState::default()).unwrap();
        let ring = RingBuffer::new(fd, 1).unwrap();
        crate::sys::testutil::touch_fresh_pages(faults);
        crate::sys::ioc_disable(ring.fd()).unwrap();
        Some(ring)
    }

    #[test]
    fn the_reader_waits_no_longer_only_while_rounds_hand_records_on_and_a_ring_is_backlogged() {
        // 24-byte samples: 64 of them fill more than a sixteenth of a page.
        let Some(mut ring) = ring_with_faults(64) else {
            return;
        };
        assert!(backlogged(&ring));
        let every = Duration::from_millis(3);
        let mut pace = Pace::new(Some(every));
        let rings = std::slice::from_mut(&mut ring);
        assert_eq!(
            pace.wait(rings),
            every,
            "a round that handed nothing on (records held back) waits"
        );
        pace.last_drained = 5;
        assert_eq!(pace.wait(rings), Duration::ZERO);
        assert_eq!(
            Pace::new(None).wait(rings),
            POLL_EVERY,
            "not reading promptly"
        );
        let mut reader = rings[0].reader();
        while reader.peek().is_some() {
            reader.consume();
        }
        drop(reader);
        assert!(!backlogged(&rings[0]));
        assert_eq!(pace.wait(rings), every, "read to the end");
    }
}
