//! When the home of a job floods its advert again, and how far.
//!
//! Zorilla's schedule (the paper, section 3.2): the first flood has radius
//! `round(log10(workers))`, clamped to `[1, max_radius]`; every further flood
//! has radius one more; between floods the home waits, starting at one
//! second and doubling up to a cap. That is [`WaitMode::Doubling`] with
//! [`FloodMode::Hops`], kept as the paper-faithful baseline.
//!
//! Two improvements, both measured in the simulator (`BENCHMARKS.md`):
//! - [`FloodMode::LatencyBounded`]: the advert also carries a latency budget
//!   that doubles per flood; nodes farther from the home than the budget
//!   neither join nor forward. Each flood then reaches a ball in network
//!   distance rather than in overlay hops.
//! - [`WaitMode::Adaptive`]: instead of a fixed one-second start, the home
//!   floods again as soon as the current flood has gone quiet: a floor, or
//!   twice the delay of the slowest answer to it so far, whichever is larger.
//!   A flood that brings no answer at all is followed by a farther one as
//!   soon as answers from its edge would have come (its budget and a half,
//!   at least the floor): nobody answered from inside the ball, so the empty
//!   rings of RTT between sites are crossed quickly. Once the budget is at
//!   its cap, a silent flood doubles the wait (up to the cap), so a full
//!   grid is not flooded at a high rate. The node's scheduler fixes the
//!   time of the next flood as it sends one, before any answer, so its
//!   waits are those of a silent flood: the budget and a half while it
//!   grows (by then every node inside the ball has answered, and the home
//!   may grant), then doubling. Answers count towards
//!   [`FloodSchedule::exhausted`].
//!
//!   **The horizon.** The home knows how far the farthest node it knows
//!   of is ([`FloodSchedule::set_horizon`]: the peers its overlay measured,
//!   the nodes that answered its floods). A silent flood that reached that
//!   far found nobody new, and a farther one would most likely find nobody
//!   either: every node known has the advert, and those that declined
//!   offer from their queue as their cores free. So the next flood waits as
//!   the paper's do (from `first_wait`, doubling), not the budget and a
//!   half, and the search counts as exhausted (a spread job takes what it
//!   has).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::advert::FloodHeader;

/// How far a flood travels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FloodMode {
    /// Limited by overlay hops only (the original Zorilla).
    Hops,
    /// Limited by a latency budget that doubles per flood, as well as by
    /// the radius schedule.
    #[default]
    LatencyBounded,
}

/// How long the home waits between floods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitMode {
    /// Start at `first_wait`, double after every flood, up to `max_wait`.
    Doubling,
    /// Flood again once the current flood has gone quiet.
    #[default]
    Adaptive,
}

/// The home's flooding schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleConfig {
    /// Hop-limited or latency-bounded floods.
    pub flood_mode: FloodMode,
    /// Doubling or adaptive waits.
    pub wait_mode: WaitMode,
    /// The first wait (doubling), or the first back-off (adaptive).
    pub first_wait: Duration,
    /// The longest wait between two floods.
    pub max_wait: Duration,
    /// The shortest wait between two floods in adaptive mode.
    pub adaptive_floor: Duration,
    /// The largest radius a home floods with.
    pub max_radius: u8,
    /// The latency budget of the first latency-bounded flood.
    pub initial_budget: Duration,
    /// The largest latency budget.
    pub max_budget: Duration,
    /// Latency-bounded only: a flood whose ball the home's earlier floods
    /// already covered goes as adverts straight to the nodes that answered
    /// those (see [`crate::node`]'s module documentation), not through
    /// the overlay again.
    #[serde(default)]
    pub direct_adverts: bool,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            flood_mode: FloodMode::LatencyBounded,
            wait_mode: WaitMode::Adaptive,
            first_wait: Duration::from_secs(1),
            max_wait: Duration::from_secs(60),
            adaptive_floor: Duration::from_millis(10),
            max_radius: 15,
            initial_budget: Duration::from_millis(1),
            max_budget: Duration::from_secs(2),
            direct_adverts: true,
        }
    }
}

impl ScheduleConfig {
    /// The original Zorilla schedule: hop floods, one second doubling.
    pub fn paper() -> Self {
        ScheduleConfig {
            flood_mode: FloodMode::Hops,
            wait_mode: WaitMode::Doubling,
            direct_adverts: false,
            ..ScheduleConfig::default()
        }
    }
}

/// The radius of the first flood for a job of `workers` workers:
/// `round(log10(workers))` clamped to `[1, max_radius]`.
pub fn initial_radius(workers: u32, max_radius: u8) -> u8 {
    let radius = f64::from(workers.max(1)).log10().round();
    // `radius` is at most 10 (log10 of u32::MAX), so the cast is exact.
    (radius as u8).clamp(1, max_radius.max(1))
}

/// How far a flood went: its radius and latency budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reach {
    /// Hops.
    pub radius: u8,
    /// Latency budget (unused by hop floods).
    pub budget: Duration,
}

/// The flooding state of one job at its home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloodSchedule {
    config: ScheduleConfig,
    /// Floods sent so far.
    floods: u32,
    /// Radius of the next flood.
    radius: u8,
    /// Budget of the next flood (latency-bounded mode).
    budget: Duration,
    /// The wait used after the previous flood (for doubling).
    wait: Duration,
    /// When the last flood went out.
    last_flood_at: Option<Time>,
    /// How far the last flood went.
    last: Option<Reach>,
    /// Answers to the last flood, and the delay of the slowest one.
    answers: u32,
    slowest_answer: Duration,
    /// Consecutive floods before the last that had no answer.
    silent_floods: u32,
    /// The next flood keeps the last one's reach, after this wait
    /// ([`FloodSchedule::stay`]).
    #[serde(default)]
    staying: Option<Duration>,
    /// How far the farthest node the home knows of is.
    #[serde(default)]
    horizon: Option<Duration>,
}

impl FloodSchedule {
    /// The schedule of a job wanting `workers` workers.
    pub fn new(config: ScheduleConfig, workers: u32) -> Self {
        FloodSchedule {
            radius: initial_radius(workers, config.max_radius),
            budget: config.initial_budget,
            wait: config.first_wait,
            config,
            floods: 0,
            last_flood_at: None,
            last: None,
            answers: 0,
            slowest_answer: Duration::ZERO,
            silent_floods: 0,
            staying: None,
            horizon: None,
        }
    }

    /// The schedule of a job wanting `workers` workers, in adaptive mode
    /// starting near `previous`: the reach (radius, budget) at which the
    /// home's previous job got its workers. It starts one hop and half the
    /// budget short of that, so it still covers every nearer node (the home
    /// picks the nearest offers in any case) without re-flooding the small
    /// balls that were exhausted a moment ago. Doubling mode ignores
    /// `previous` (the paper had no such memory).
    pub fn resume(config: ScheduleConfig, workers: u32, previous: Option<Reach>) -> Self {
        let mut schedule = FloodSchedule::new(config, workers);
        if let (WaitMode::Adaptive, Some(previous)) = (schedule.config.wait_mode, previous) {
            schedule.radius = schedule
                .radius
                .max(previous.radius.saturating_sub(1))
                .max(1);
            schedule.budget = schedule.budget.max(previous.budget / 2);
        }
        schedule
    }

    /// Before the first latency-bounded flood: doubles its budget (and
    /// adds a hop to its radius per doubling) until it reaches `distance`,
    /// up to the caps. A job that needs the nodes out to `distance` then
    /// reaches them with one flood, not with one per doubling, each
    /// flooding the nearer ball again; the home still chooses the nearest
    /// offers. Nothing changes once a flood went out, nor for hop floods.
    pub fn reach_at_least(&mut self, distance: Duration) {
        if self.config.flood_mode != FloodMode::LatencyBounded || self.floods > 0 {
            return;
        }
        while self.budget < distance && self.budget < self.config.max_budget {
            self.budget = self.budget.saturating_mul(2).min(self.config.max_budget);
            self.radius = self.radius.saturating_add(1).min(self.config.max_radius);
        }
    }

    /// Whether the last flood has had no answer so far.
    pub fn quiet(&self) -> bool {
        self.floods > 0 && self.answers == 0
    }

    /// Whether the last three floods, each reaching farther than the one
    /// before, brought no answer at all: there is probably nothing more to
    /// find. One silent flood proves little (a doubled budget may still fall
    /// short of the next site).
    pub fn exhausted(&self) -> bool {
        self.quiet() && (self.silent_floods >= 2 || self.past_horizon())
    }

    /// Tells the schedule how far the farthest node the home knows of is
    /// (see the module documentation's horizon).
    pub fn set_horizon(&mut self, horizon: Option<Duration>) {
        self.horizon = horizon;
    }

    /// Whether a later flood (not the first: a silent first flood says
    /// more of lost messages than of the grid) reached the horizon.
    fn past_horizon(&self) -> bool {
        self.config.flood_mode == FloodMode::LatencyBounded
            && self.floods > 1
            && matches!((self.last, self.horizon), (Some(last), Some(horizon)) if last.budget >= horizon)
    }

    /// How far the last flood went (`None` before the first).
    pub fn reach(&self) -> Option<Reach> {
        self.last
    }

    /// The configuration.
    pub fn config(&self) -> &ScheduleConfig {
        &self.config
    }

    /// Floods sent so far.
    pub fn floods(&self) -> u32 {
        self.floods
    }

    /// The radius of the last flood sent (0 before the first).
    pub fn radius_reached(&self) -> u8 {
        self.last.map_or(0, |reach| reach.radius)
    }

    /// The latency budget of the last flood sent, in latency-bounded mode.
    pub fn budget_reached(&self) -> Option<Duration> {
        match self.config.flood_mode {
            FloodMode::LatencyBounded => self.last.map(|reach| reach.budget),
            FloodMode::Hops => None,
        }
    }

    /// When the last flood went out.
    pub fn last_flood_at(&self) -> Option<Time> {
        self.last_flood_at
    }

    /// The header of the flood to send now; advances the schedule.
    pub fn next_flood(&mut self, now: Time) -> FloodHeader {
        let latency_budget = match self.config.flood_mode {
            FloodMode::Hops => None,
            FloodMode::LatencyBounded => Some(self.budget),
        };
        let ttl = self.radius;
        let header = FloodHeader {
            seq: self.floods,
            ttl,
            latency_budget,
            path_rtt: Duration::ZERO,
        };
        if let Some(previous) = self.last_flood_at {
            // The wait that ended now becomes the base of the next one.
            self.wait = now.saturating_sub(previous);
        }
        if self.floods > 0 && self.config.wait_mode == WaitMode::Doubling {
            self.wait = self.wait.max(self.config.first_wait);
        }
        if self.floods > 0 {
            self.silent_floods = if self.answers == 0 {
                self.silent_floods.saturating_add(1)
            } else {
                0
            };
        }
        self.floods = self.floods.saturating_add(1);
        self.staying = None;
        self.last = Some(Reach {
            radius: ttl,
            budget: self.budget,
        });
        self.radius = self.radius.saturating_add(1).min(self.config.max_radius);
        self.budget = self.budget.saturating_mul(2).min(self.config.max_budget);
        self.last_flood_at = Some(now);
        self.answers = 0;
        self.slowest_answer = Duration::ZERO;
        header
    }

    /// Records an answer (offer or decline) that arrived at `now`.
    pub fn answer(&mut self, now: Time) {
        if let Some(sent) = self.last_flood_at {
            self.answers = self.answers.saturating_add(1);
            self.slowest_answer = self.slowest_answer.max(now.saturating_sub(sent));
        }
    }

    /// Keeps the last flood's reach for the next one: the home asked only
    /// part of its ball (the nearest nodes it knows, in a batch, the
    /// farthest of them at `farthest`) and asks the rest next, as soon as
    /// the batch has had time to answer (twice that RTT, at least the
    /// floor).
    pub fn stay(&mut self, farthest: Duration) {
        if let Some(last) = self.last {
            self.radius = last.radius;
            self.budget = last.budget;
            self.staying = Some(farthest.saturating_mul(2).max(self.config.adaptive_floor));
        }
    }

    /// Whether the next flood reaches farther than the last one (a larger
    /// latency budget).
    fn growing(&self) -> bool {
        self.config.flood_mode == FloodMode::LatencyBounded
            && self.last.is_some_and(|r| r.budget < self.budget)
    }

    /// When the next flood is due.
    pub fn next_flood_at(&self) -> Time {
        let Some(sent) = self.last_flood_at else {
            return Time::ZERO;
        };
        let wait = match (self.config.wait_mode, self.staying) {
            (WaitMode::Doubling, _) if self.floods == 1 => self.config.first_wait,
            (WaitMode::Doubling, _) => self.wait.saturating_mul(2),
            (WaitMode::Adaptive, Some(wait)) => wait,
            (WaitMode::Adaptive, None) if self.answers == 0 && self.past_horizon() => {
                // Every node known has the advert: wait as the paper's
                // floods do.
                self.wait.saturating_mul(2).max(self.config.first_wait)
            }
            (WaitMode::Adaptive, None) if self.answers == 0 && self.growing() => {
                // Nobody answered from inside the ball, and the next flood
                // reaches farther: go there as soon as answers from the
                // ball's edge would have come (within the budget: half of
                // it out along the flood's path, at most half back), with
                // half as much again for delays on the way.
                let budget = self.last.map_or(Duration::ZERO, |r| r.budget);
                budget
                    .saturating_add(budget / 2)
                    .max(self.config.adaptive_floor)
            }
            (WaitMode::Adaptive, None) if self.answers == 0 && self.floods > 1 => {
                self.wait.saturating_mul(2).max(self.config.adaptive_floor)
            }
            (WaitMode::Adaptive, None) => self
                .slowest_answer
                .saturating_mul(2)
                .max(self.config.adaptive_floor),
        };
        sent.saturating_add(wait.min(self.config.max_wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(x: u64) -> Duration {
        Duration::from_secs(x)
    }

    #[test]
    fn initial_radius_is_log10_of_workers_clamped() {
        assert_eq!(initial_radius(1, 15), 1);
        assert_eq!(initial_radius(8, 15), 1);
        assert_eq!(initial_radius(40, 15), 2);
        assert_eq!(initial_radius(671, 15), 3);
        assert_eq!(initial_radius(u32::MAX, 15), 10);
        assert_eq!(initial_radius(u32::MAX, 4), 4);
    }

    #[test]
    fn paper_schedule_grows_radius_by_one_and_doubles_the_wait_to_the_cap() {
        let mut schedule = FloodSchedule::new(ScheduleConfig::paper(), 100);
        let mut now = Time::ZERO;
        let mut radii = Vec::new();
        let mut waits = Vec::new();
        for _ in 0..9 {
            let header = schedule.next_flood(now);
            assert_eq!(header.latency_budget, None);
            radii.push(header.ttl);
            let next = schedule.next_flood_at();
            waits.push((next - now).as_secs());
            now = next;
        }
        assert_eq!(radii, vec![2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(waits, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn latency_bounded_budget_doubles_up_to_its_cap() {
        let config = ScheduleConfig {
            max_budget: Duration::from_millis(6),
            ..ScheduleConfig::default()
        };
        let mut schedule = FloodSchedule::new(config, 8);
        let budgets: Vec<_> = (0..5)
            .map(|i| schedule.next_flood(secs(i)).latency_budget.unwrap())
            .collect();
        let ms = Duration::from_millis;
        assert_eq!(budgets, vec![ms(1), ms(2), ms(4), ms(6), ms(6)]);
        // What the last flood carried, also at the cap.
        assert_eq!(schedule.budget_reached(), Some(ms(6)));
    }

    #[test]
    fn adaptive_schedule_resumes_near_the_previous_reach_but_paper_does_not() {
        let ms = Duration::from_millis;
        let previous = Some(Reach {
            radius: 4,
            budget: ms(16),
        });
        let mut adaptive = FloodSchedule::resume(ScheduleConfig::default(), 8, previous);
        let header = adaptive.next_flood(Time::ZERO);
        assert_eq!((header.ttl, header.latency_budget), (3, Some(ms(8))));
        let mut paper = FloodSchedule::resume(ScheduleConfig::paper(), 8, previous);
        assert_eq!(paper.next_flood(Time::ZERO).ttl, 1);
    }

    #[test]
    fn the_first_flood_reaches_at_least_as_far_as_asked_in_doublings() {
        let ms = Duration::from_millis;
        let mut schedule = FloodSchedule::new(ScheduleConfig::default(), 8);
        schedule.reach_at_least(ms(5));
        let header = schedule.next_flood(Time::ZERO);
        // 1 ms doubled three times, a hop more each time.
        assert_eq!((header.ttl, header.latency_budget), (4, Some(ms(8))));
        // Once a flood went out, the schedule is its own.
        schedule.reach_at_least(ms(100));
        assert_eq!(schedule.next_flood(ms(10)).latency_budget, Some(ms(16)));
        // Capped; and hop floods have no budget to grow.
        let mut far = FloodSchedule::new(ScheduleConfig::default(), 8);
        far.reach_at_least(Duration::from_secs(3600));
        assert_eq!(far.next_flood(Time::ZERO).latency_budget, Some(ms(2000)));
        let mut hops = FloodSchedule::new(ScheduleConfig::paper(), 8);
        hops.reach_at_least(ms(5));
        assert_eq!(hops.next_flood(Time::ZERO).ttl, 1);
    }

    #[test]
    fn adaptive_wait_follows_the_slowest_answer_then_backs_off_when_silent() {
        let ms = Duration::from_millis;
        let config = ScheduleConfig {
            initial_budget: ms(20),
            max_budget: ms(40),
            ..ScheduleConfig::default()
        };
        let mut schedule = FloodSchedule::new(config, 8);
        schedule.next_flood(ms(0));
        assert_eq!(
            schedule.next_flood_at(),
            ms(30),
            "the budget and a half before any answer"
        );
        schedule.answer(ms(3));
        schedule.answer(ms(60));
        assert_eq!(
            schedule.next_flood_at(),
            ms(120),
            "twice the slowest answer"
        );
        schedule.next_flood(ms(120));
        // No answer to this flood (budget 40 ms, the largest): the wait
        // (120 ms) doubles, and doubles again.
        assert_eq!(schedule.next_flood_at(), ms(120 + 240));
        schedule.next_flood(ms(360));
        assert_eq!(schedule.next_flood_at(), ms(360 + 480));
    }

    #[test]
    fn a_silent_flood_is_followed_by_a_farther_one_as_soon_as_its_answers_would_have_come() {
        let ms = Duration::from_millis;
        let mut schedule = FloodSchedule::new(ScheduleConfig::default(), 8);
        let mut now = ms(0);
        let mut waits = Vec::new();
        for _ in 0..6 {
            schedule.next_flood(now);
            let due = schedule.next_flood_at();
            waits.push((due - now).as_millis());
            now = due;
        }
        // Budgets 1, 2, 4, 8, 16, 32 ms, nobody answering: the floor, then
        // each budget and a half, not a doubling back-off on top of the
        // doubling budget.
        assert_eq!(waits, vec![10, 10, 10, 12, 24, 48]);
    }

    #[test]
    fn past_the_horizon_a_silent_flood_backs_off_as_the_papers_and_the_search_is_exhausted() {
        let ms = Duration::from_millis;
        let mut schedule = FloodSchedule::new(ScheduleConfig::default(), 8);
        schedule.set_horizon(Some(ms(3)));
        let mut now = ms(0);
        let mut waits = Vec::new();
        let mut exhausted = Vec::new();
        for _ in 0..5 {
            schedule.next_flood(now);
            exhausted.push(schedule.exhausted());
            let due = schedule.next_flood_at();
            waits.push((due - now).as_millis());
            now = due;
        }
        // Budgets 1, 2, 4 (past the 3 ms horizon), 8, 16 ms, nobody
        // answering: once past the horizon, a second, then doubling.
        assert_eq!(waits, vec![10, 10, 1000, 2000, 4000]);
        assert_eq!(exhausted, vec![false, false, true, true, true]);
        // An answer to the flood past the horizon: not exhausted, and the
        // wait follows the answer again.
        schedule.next_flood(now);
        schedule.answer(now + ms(3));
        assert!(!schedule.exhausted());
        assert_eq!(schedule.next_flood_at(), now + ms(10));
    }

    mod properties {
        use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};

        use super::*;

        /// A driver's step: answers arrive after the last flood, then the
        /// next flood goes out when it is due or later.
        #[derive(Debug, Clone)]
        struct Step {
            answers: Vec<u64>,
            late_by: u64,
        }

        fn step() -> impl proptest::strategy::Strategy<Value = Step> {
            use proptest::strategy::Strategy as _;
            (proptest::collection::vec(0u64..5_000, 0..4), 0u64..3_000)
                .prop_map(|(answers, late_by)| Step { answers, late_by })
        }

        proptest! {
            /// Whatever the configuration and however answers come: the
            /// radius and the budget never shrink and stay within their
            /// caps, the reach reported is what the last flood carried, and
            /// every wait lies between the shortest wait and the cap.
            #[test]
            fn radius_and_budget_grow_and_waits_stay_within_bounds(
                hops in any::<bool>(),
                doubling in any::<bool>(),
                first_wait in 1u64..3_000,
                extra_wait in 0u64..120_000,
                floor in 1u64..100,
                max_radius in 1u8..16,
                initial_budget in 1u64..20,
                extra_budget in 0u64..5_000,
                workers in 1u32..100_000,
                steps in proptest::collection::vec(step(), 1..25),
            ) {
                let us = Duration::from_micros;
                let config = ScheduleConfig {
                    flood_mode: if hops { FloodMode::Hops } else { FloodMode::LatencyBounded },
                    wait_mode: if doubling { WaitMode::Doubling } else { WaitMode::Adaptive },
                    first_wait: Duration::from_millis(first_wait),
                    max_wait: Duration::from_millis(first_wait + extra_wait),
                    adaptive_floor: Duration::from_millis(floor),
                    max_radius,
                    initial_budget: Duration::from_millis(initial_budget),
                    max_budget: Duration::from_millis(initial_budget + extra_budget),
                    direct_adverts: !hops,
                };
                let shortest = match config.wait_mode {
                    WaitMode::Doubling => config.first_wait,
                    WaitMode::Adaptive => config.adaptive_floor,
                }
                .min(config.max_wait);
                let mut schedule = FloodSchedule::new(config.clone(), workers);
                let mut now = Time::ZERO;
                let mut previous: Option<FloodHeader> = None;
                for step in steps {
                    let header = schedule.next_flood(now);
                    prop_assert!(header.ttl >= 1 && header.ttl <= max_radius);
                    match previous {
                        None => prop_assert_eq!(header.ttl, initial_radius(workers, max_radius)),
                        Some(p) => {
                            prop_assert!(header.ttl >= p.ttl, "radius shrank");
                            prop_assert!(header.latency_budget >= p.latency_budget, "budget shrank");
                        }
                    }
                    match header.latency_budget {
                        None => prop_assert!(hops),
                        Some(budget) => prop_assert!(
                            !hops && budget >= config.initial_budget && budget <= config.max_budget
                        ),
                    }
                    prop_assert_eq!(schedule.radius_reached(), header.ttl);
                    prop_assert_eq!(schedule.budget_reached(), header.latency_budget);
                    prop_assert_eq!(schedule.reach().map(|r| r.radius), Some(header.ttl));
                    previous = Some(header);

                    for delay in step.answers {
                        schedule.answer(now + us(delay));
                    }
                    let due = schedule.next_flood_at();
                    let wait = due - now;
                    prop_assert!(
                        wait >= shortest && wait <= config.max_wait,
                        "wait {:?} outside [{:?}, {:?}]", wait, shortest, config.max_wait
                    );
                    now = due + us(step.late_by);
                }
            }
        }
    }
}
