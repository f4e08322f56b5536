//! The scheduler as a job's **home**: submitting, flooding, collecting
//! offers, granting ranks, taking in the ranks' ends and losses (with the
//! [`RankTable`]), and ending the job.

use super::*;

impl<P: PeerKey> Scheduler<P> {
    pub(super) fn submit(
        &mut self,
        now: Time,
        job: JobId,
        spec: Admitted,
        owner: Option<P>,
        out: &mut Vec<Output<P>>,
    ) {
        // The spec's limits were checked as it was admitted.
        if self.home.contains_key(&job) {
            let error = SpecError::Duplicate(job);
            out.push(Output::Job(JobEvent::Rejected { job, error }));
            return;
        }
        let spec = spec.into_spec();
        let ranks = RankTable::for_spec(&spec);
        let mut schedule = FloodSchedule::resume(
            self.config.schedule.clone(),
            spec.workers.max,
            self.last_reach,
        );
        if let Some(distance) = self.first_reach(spec.workers.min, &spec.per_worker) {
            schedule.reach_at_least(distance);
        }
        let report = PendingReport {
            needed: spec.workers.min,
            ..PendingReport::default()
        };
        self.home.insert(
            job,
            HomeJob {
                // Saturating: `now` may be large, and the lifetime is
                // bounded by validation only.
                expires_at: now.saturating_add(spec.lifetime),
                spec,
                owner,
                phase: Phase::Scheduling,
                schedule,
                next_flood_at: Some(now),
                offers: BTreeMap::new(),
                worked: BTreeMap::new(),
                granted_holds: BTreeMap::new(),
                ranks,
                grants: 0,
                earlier_floods: 0,
                settle_at: None,
                settling: false,
                sufficed_since: None,
                ended_with: None,
                report,
                logged_checkpoints: 0,
                answered: BTreeSet::new(),
                asked: BTreeMap::new(),
                reach: None,
            },
        );
    }

    /// Remembers that `node`, at `rtt`, answered a flood of this home.
    pub(super) fn know(&mut self, node: P, rtt: Duration, now: Time) {
        if node == self.id {
            return;
        }
        make_room(&mut self.known, &node, MAX_KNOWN_NODES, |k| k.seen);
        self.known.insert(node, KnownNode { rtt, seen: now });
    }

    /// Where the flood of `job_id` with `header` goes as direct adverts:
    /// the remembered nodes inside its budget that the job has not asked
    /// yet, with the RTT to each, at most [`MAX_DIRECT_PER_STEP`] of them,
    /// the nearest (the next step asks the rest of the same ball); `None`
    /// when it must be flooded (beyond the ball known; see the module
    /// documentation). Either way they count as asked from now.
    fn direct_targets(
        &mut self,
        job_id: JobId,
        header: &FloodHeader,
        now: Time,
    ) -> Option<Vec<(P, Duration)>> {
        let schedule = &self.config.schedule;
        if !schedule.direct_adverts || schedule.flood_mode != FloodMode::LatencyBounded {
            return None;
        }
        let budget = header.latency_budget?;
        let job = self.home.get_mut(&job_id)?;
        let mut targets: Vec<(P, Duration)> = self
            .known
            .iter()
            .filter(|(node, k)| {
                k.rtt <= budget
                    && now.saturating_sub(k.seen) < KNOWLEDGE_KEPT
                    && job
                        .asked
                        .get(*node)
                        .is_none_or(|at| now.saturating_sub(*at) >= ASK_AGAIN_AFTER)
            })
            .map(|(node, k)| (node.clone(), k.rtt))
            .collect();
        let known_ball = self.flooded.is_some_and(|(covered, at)| {
            budget <= covered.budget
                && header.ttl <= covered.radius
                && now.saturating_sub(at) < KNOWLEDGE_KEPT
        });
        if known_ball {
            // The nearest first; beyond a step's worth, the rest of the
            // ball at the next step.
            targets.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
            if targets.len() > MAX_DIRECT_PER_STEP {
                targets.truncate(MAX_DIRECT_PER_STEP);
                let farthest = targets.last().map_or(Duration::ZERO, |t| t.1);
                job.schedule.stay(farthest);
            }
        }
        // Asked now, by a direct advert or by the flood: a later step
        // inside the ball does not ask them again.
        for (node, _) in &targets {
            job.asked.insert(node.clone(), now);
        }
        known_ball.then_some(targets)
    }

    /// Sends due floods and grants settled allocations.
    pub(super) fn step_home_jobs(&mut self, now: Time, out: &mut Vec<Output<P>>) {
        let jobs: Vec<JobId> = self.home.keys().copied().collect();
        for job_id in jobs {
            self.try_allocate(now, job_id, out);
            let Some(job) = self.home.get_mut(&job_id) else {
                continue;
            };
            // While offers enough to start are settling, another flood
            // would only reach farther nodes that will not be chosen.
            if job.next_flood_at.is_some_and(|at| at <= now) && !job.settling {
                // A running job searches (to grow, or to replace lost
                // ranks) for as long as it runs: every flood advertises
                // its lifetime from now, as its search's first did (see
                // `flood_afresh`). A search that outlasted the lifetime
                // would otherwise advertise an expiry of zero, and every
                // offer would be withdrawn as soon as it is made.
                if job.phase != Phase::Scheduling {
                    job.expires_at = job.expires_at.max(now.saturating_add(job.spec.lifetime));
                }
                // The farthest node this home knows of: what its overlay
                // measured, and what answered its floods.
                let farthest_answered = self.known.values().map(|k| k.rtt).max();
                let horizon = self.peer_distances.last().copied().max(farthest_answered);
                job.schedule.set_horizon(horizon);
                let mut header = job.schedule.next_flood(now);
                header.seq = header.seq.saturating_add(job.earlier_floods);
                job.report.floods = job.schedule.floods();
                job.report.radius = header.ttl;
                job.report.budget = header.latency_budget;
                let advert = job.advert(job_id, &self.id, header, now);
                // The home considers its own machine first (it is the
                // nearest there is), and again at every flood, as any
                // member does, to raise a short offer.
                self.advert(now, advert.clone(), Duration::ZERO, out);
                match self.direct_targets(job_id, &header, now) {
                    Some(targets) => {
                        for (to, rtt) in targets {
                            let mut direct = advert.clone();
                            direct.flood.ttl = 0;
                            direct.flood.path_rtt = rtt;
                            out.push(Output::Send {
                                to,
                                msg: Message::Advert(direct),
                            });
                        }
                    }
                    None => {
                        let reach = Reach {
                            radius: header.ttl,
                            budget: header.latency_budget.unwrap_or_default(),
                        };
                        // A flood that covers the ball known so far
                        // renews it; a smaller one leaves the larger
                        // ball's knowledge to age.
                        let renews = self.flooded.is_none_or(|(c, _)| {
                            reach.radius >= c.radius && reach.budget >= c.budget
                        });
                        if renews {
                            self.flooded = Some((reach, now));
                        }
                        out.push(Output::Flood(advert));
                    }
                }
                // After the step's targets: a batch of them keeps the ball
                // for the next step (`FloodSchedule::stay`).
                if let Some(job) = self.home.get_mut(&job_id) {
                    job.next_flood_at = Some(job.schedule.next_flood_at());
                }
            }
        }
    }

    /// The home's decision for a job: grant when the offers in hand can
    /// start it (or, once running, grow it) and the flood has settled.
    pub(super) fn try_allocate(&mut self, now: Time, job_id: JobId, out: &mut Vec<Output<P>>) {
        let Some(job) = self.home.get_mut(&job_id) else {
            return;
        };
        // Recomputed from scratch at every step.
        job.settle_at = None;
        job.settling = false;
        if job.phase > Phase::Running || job.offers.is_empty() {
            return;
        }
        // A job that runs more than once starts every run at once, and
        // never grows or replaces: a run that lost a worker is given up.
        let runs = u32::from(job.spec.runs);
        if runs > 1 && job.phase != Phase::Scheduling {
            return;
        }
        let granted = job.granted_workers();
        let wanted = job.usable_workers().saturating_sub(granted);
        if wanted == 0 {
            return;
        }
        let avoided = &self.avoided;
        let mut candidates: Vec<Candidate<P>> = job
            .offers
            .iter()
            .filter(|(node, _)| !avoided.contains(node))
            .map(|(node, offer)| Candidate {
                node: node.clone(),
                rtt: offer.rtt,
                offered: offer.workers,
                machine: offer.machine,
            })
            .collect();
        let needed_now = match job.phase {
            // Before the start the job needs `min` in all.
            Phase::Scheduling => job.spec.workers.min.saturating_sub(granted),
            // A rigid job rolling back restarts its ranks together, as it
            // started: each fresh worker's grant names where all the
            // others are (the job's size among them).
            _ if job.spec.workers.is_rigid() && job.spec.on_worker_lost == LostPolicy::Rollback => {
                wanted
            }
            // A running (malleable, or rigid replacing) job takes any.
            _ => 1,
        };
        // A native job's ranks connect to each other directly: only nodes
        // that reach each other (not those behind another NAT) are
        // candidates. The tasks of an array talk to nobody.
        let direct = matches!(job.spec.kind, crate::advert::WorkKind::Native(_))
            && job.spec.tasks.is_none()
            && job.spec.workers.max > 1;
        if direct {
            let group = reachable_together(&candidates, job.reach, needed_now);
            job.report.apart = group.apart;
            candidates = group.candidates;
        }
        let offered = candidates
            .iter()
            .fold(0u32, |sum, c| sum.saturating_add(c.offered));
        if offered < needed_now {
            return;
        }
        let n = offered.min(wanted);
        let prefer = self.config.prefer;
        let mut runs_apart = Apart::Owners;
        let assignments = if runs > 1 {
            let size = job.spec.workers.max / runs;
            // `self.owners` alone: the job is borrowed from `self.home`.
            let owners = &self.owners;
            let owner_of = |node: &P| owner_in(owners, node);
            allocate_runs(job.spec.strategy, &candidates, runs, size, prefer, owner_of).map(
                |(assignments, apart)| {
                    runs_apart = apart;
                    assignments
                },
            )
        } else {
            allocate_preferring(job.spec.strategy, &candidates, n, prefer)
        };
        let Some(assignments) = assignments else {
            return;
        };
        // Spread wants one node per worker: while floods still find new
        // nodes, wait for them rather than doubling up early, until floods
        // stop finding any.
        let flood_due = job.next_flood_at.is_some_and(|at| at <= now);
        let spread_waits = runs == 1
            && job.spec.strategy == Strategy::Spread
            && (candidates.len() as u32) < n
            && job.next_flood_at.is_some()
            && !(flood_due && job.schedule.exhausted());
        // Runs that only distinct nodes keep apart, some of one owner:
        // likewise, while floods still find new nodes, wait for another
        // owner's (a node busy a moment ago offers again as it frees up).
        let owners_wait = runs_apart == Apart::Nodes
            && job.next_flood_at.is_some()
            && !(flood_due && job.schedule.exhausted());
        if spread_waits || owners_wait {
            return;
        }
        let farthest = assignments
            .iter()
            .filter_map(|a| job.offers.get(&a.node).map(|o| o.rtt))
            .max()
            .unwrap_or_default();
        let settle_at = match job.schedule.config().wait_mode {
            WaitMode::Doubling => now,
            WaitMode::Adaptive => {
                // The RTTs come from peers: saturating, never a panic.
                // Slack for answers delayed on their way: delays grow with
                // the path, so half the farthest RTT, at most
                // `SETTLE_SLACK`. None when only this node was chosen:
                // nothing is nearer than that.
                let slack = (farthest / 2).min(SETTLE_SLACK);
                // No flood of this search went out yet (a running job's
                // search started afresh, the offers in hand answering
                // direct adverts): there is no flood's answers to wait
                // for. Waiting from `now` instead moved the settling
                // along with the clock, and a settling job sends no flood:
                // an array's offers sat until their holds ran out (30 s).
                let flood_settled = job.schedule.last_flood_at().map_or(now, |sent| {
                    sent.saturating_add(farthest.saturating_mul(2))
                        .saturating_add(slack)
                });
                // Offers also come in bursts without a flood: cores that
                // free up together (a job ended) serve the adverts queued
                // on them together, each offer after its node's one-way
                // delay. A fresh offer from a node nearer than the
                // farthest one chosen may be the first of such a burst,
                // whose other nearer nodes answer within half the
                // farthest RTT of it: wait that long (twice, for jitter)
                // rather than grant far nodes with near answers on their
                // way. A node counts once per offer it holds: one that
                // withdraws and offers again starts the wait again, so
                // the wait ends at most twice the farthest RTT after the
                // offers first sufficed (a peer cannot put the grant off
                // for ever).
                let sufficed = *job.sufficed_since.get_or_insert(now);
                let burst_settled = job
                    .offers
                    .values()
                    .filter(|o| o.rtt < farthest)
                    .map(|o| o.since)
                    .max()
                    .map_or(now, |since| since.saturating_add(farthest))
                    .min(sufficed.saturating_add(farthest.saturating_mul(2)));
                flood_settled.max(burst_settled)
            }
        };
        if settle_at > now {
            job.settle_at = Some(settle_at);
            job.settling = true;
            return;
        }

        // Grant: ranks in slist order, reusing lost ranks first. Every
        // grant carries the placement after all of this step's grants, so
        // that the nodes granted together know of each other.
        job.sufficed_since = None;
        let mut granted = Vec::with_capacity(assignments.len());
        let mut replaced_now = Vec::new();
        for assignment in &assignments {
            let Some(offer) = job.offers.remove(&assignment.node) else {
                continue;
            };
            let incarnation = job.grants;
            job.grants = job.grants.saturating_add(1);
            if direct && offer.machine.reach != Reachability::Unknown {
                // The job's later ranks must reach this one.
                job.reach.get_or_insert(offer.machine.reach);
            }
            job.granted_holds
                .insert(assignment.node.clone(), offer.hold);
            let (ranks, replaced) =
                job.ranks
                    .place(&assignment.node, incarnation, assignment.workers);
            if ranks.is_empty() {
                // An array with no task left for this node (it had fewer
                // waiting than were counted): nothing to grant.
                out.push(Output::Send {
                    to: assignment.node.clone(),
                    msg: Message::Refuse {
                        job: job_id,
                        hold: Some(offer.hold),
                        reason: RefuseReason::NotChosen,
                    },
                });
                continue;
            }
            replaced_now.extend(&replaced);
            for rank in &ranks {
                job.worked
                    .insert(*rank, (assignment.node.clone(), now, offer.machine.speed));
            }
            out.push(Output::Job(JobEvent::Granted {
                job: job_id,
                node: assignment.node.clone(),
                ranks: ranks.clone(),
                incarnation,
                rtt: offer.rtt,
                replaced,
            }));
            granted.push((assignment.node.clone(), offer.hold, ranks, incarnation));
        }
        let placement = job.ranks.placement();
        for (node, hold, ranks, incarnation) in &granted {
            // An array's tasks are worlds of their own: a node learns
            // where its own run, not where the others do.
            let placement = if job.is_array() {
                placement
                    .iter()
                    .filter(|(_, placed)| placed.node == *node)
                    .map(|(rank, placed)| (*rank, placed.clone()))
                    .collect()
            } else {
                placement.clone()
            };
            out.push(Output::Send {
                to: node.clone(),
                msg: Message::Grant {
                    job: job_id,
                    hold: *hold,
                    ranks: ranks.clone(),
                    incarnation: *incarnation,
                    placement,
                },
            });
        }
        let total = job.granted_workers();
        job.report.granted = total;
        if job.phase == Phase::Scheduling && job.phase.advance(Phase::Running) {
            out.push(Output::Job(JobEvent::Started {
                job: job_id,
                workers: total,
            }));
        }
        if total >= job.usable_workers() {
            self.last_reach = job.schedule.reach();
            job.full(job_id, out);
        }
        // The nodes that ran ranks before learn of the new ones (and of the
        // start); the nodes granted now have it all in their grant. An
        // array's nodes need not know of each other's tasks.
        let skip: BTreeSet<P> = granted.into_iter().map(|(node, ..)| node).collect();
        if !skip.is_empty() && !job.is_array() {
            job.announce(job_id, replaced_now, &skip, out);
        }
    }

    /// Ends a job at its home: held offers are refused with `refuse`, and
    /// unless it completed, nodes running its workers are told to stop.
    pub(super) fn end_job(
        &mut self,
        job_id: JobId,
        phase: Phase,
        refuse: RefuseReason,
        reason: EndReason<P>,
        out: &mut Vec<Output<P>>,
    ) {
        let Some(job) = self.home.get_mut(&job_id) else {
            return;
        };
        if !job.phase.advance(phase) {
            return;
        }
        job.ended_with = Some(refuse);
        job.next_flood_at = None;
        job.settle_at = None;
        for (node, offer) in std::mem::take(&mut job.offers) {
            *job.report.refusals.entry(refuse).or_default() += 1;
            out.push(Output::Send {
                to: node,
                msg: Message::Refuse {
                    job: job_id,
                    hold: Some(offer.hold),
                    reason: refuse,
                },
            });
        }
        if phase != Phase::Completed {
            for node in job.ranks.nodes() {
                out.push(Output::Send {
                    to: node,
                    msg: Message::Refuse {
                        job: job_id,
                        hold: None,
                        reason: refuse,
                    },
                });
            }
        }
        // Every node of the job learns how it ended (a copy shows it).
        job.announce(job_id, Vec::new(), &BTreeSet::new(), out);
        out.push(Output::Job(JobEvent::Ended {
            job: job_id,
            phase,
            reason,
        }));
        self.ended.push_back(job_id);
        while self.ended.len() > self.config.ended_capacity {
            if let Some(old) = self.ended.pop_front() {
                self.home.remove(&old);
            }
        }
    }

    pub(super) fn offer_received(
        &mut self,
        now: Time,
        from: P,
        job_id: JobId,
        offer: OfferIn,
        out: &mut Vec<Output<P>>,
    ) {
        let OfferIn {
            hold,
            workers,
            rtt,
            machine,
        } = offer;
        if self.home.contains_key(&job_id) {
            self.know(from.clone(), rtt, now);
        }
        let refuse = match self.home.get_mut(&job_id) {
            None => Some(RefuseReason::UnknownJob),
            // The node raised a hold that a grant on its way to it uses:
            // the grant releases the rest.
            Some(job) if job.granted_holds.get(&from) == Some(&hold) => None,
            // A node that dissented from a majority of runs computes
            // nothing for this home any more (see `crate::runs`).
            Some(job) if self.avoided.contains(&from) => {
                *job.report
                    .refusals
                    .entry(RefuseReason::NotChosen)
                    .or_default() += 1;
                Some(RefuseReason::NotChosen)
            }
            Some(job) => {
                job.new_answer(&from, now);
                job.report.nodes_answered += 1;
                job.report.offers += 1;
                job.report.workers_offered = job
                    .report
                    .workers_offered
                    .saturating_add(u64::from(workers));
                let reason = match job.ended_with {
                    // Ended: cancelled, expired, failed or completed, the
                    // reason it ended with.
                    Some(reason) => Some(reason),
                    None if job.granted_workers() >= job.spec.workers.max => {
                        Some(RefuseReason::JobFull)
                    }
                    None => None,
                };
                match reason {
                    Some(reason) => {
                        *job.report.refusals.entry(reason).or_default() += 1;
                        Some(reason)
                    }
                    None => {
                        let held = job.offers.entry(from.clone()).or_insert(HeldOffer {
                            hold,
                            workers: 0,
                            rtt,
                            machine,
                            since: now,
                        });
                        if held.hold == hold {
                            // A raise (or the same offer again).
                            held.workers = held.workers.max(workers);
                        } else {
                            // A new hold: the node gave the one held here
                            // up (its withdrawal is on its way).
                            held.hold = hold;
                            held.workers = workers;
                        }
                        held.rtt = rtt;
                        held.machine = machine;
                        None
                    }
                }
            }
        };
        match refuse {
            Some(reason) => out.push(Output::Send {
                to: from,
                msg: Message::Refuse {
                    job: job_id,
                    hold: Some(hold),
                    reason,
                },
            }),
            // The offer may complete what the job waits for: decided now,
            // not at the job's next flood (which a running job's search,
            // an array's say, may send only much later).
            None => self.try_allocate(now, job_id, out),
        }
    }

    /// A node reported the end of a rank's worker: the rank table records
    /// it (unless it is stale), and the job fails or completes by it (a
    /// job that runs more than once, by its runs once none runs).
    pub(super) fn rank_ended(
        &mut self,
        now: Time,
        job_id: JobId,
        ended: RankEnd<P>,
        out: &mut Vec<Output<P>>,
    ) {
        let RankEnd {
            node,
            rank,
            incarnation,
            end,
            digest,
        } = ended;
        let Some(job) = self.home.get_mut(&job_id) else {
            return;
        };
        let outcome = RankOutcome::from(end);
        // Only a job that runs more than once, or a spot-checked array,
        // compares digests.
        let spot = job.spec.tasks.map_or(0, |t| t.spot_checks);
        let digest = digest.filter(|_| job.spec.runs > 1 || spot > 0);
        // Picked after the fact, so that the member could not know.
        let check = spot > 0 && self.rng.random_range(0..100u8) < spot;
        if !job
            .ranks
            .end(&node, rank, incarnation, outcome.clone(), digest, check)
        {
            return; // Stale (a replaced worker's), repeated, or unknown.
        }
        if let Some((by, at, speed)) = job.worked.remove(&rank)
            && by == node
            && node != self.id
        {
            let ms = millis(now.saturating_sub(at));
            let own = self.config.speed;
            self.favours
                .received(&node, job.spec.per_worker.cores, ms, speed, own, now);
        }
        out.push(Output::Job(JobEvent::RankEnded {
            job: job_id,
            node: node.clone(),
            rank,
            outcome: outcome.clone(),
            digest,
            check,
        }));
        // A job that ended already keeps its end (the rank's outcome is
        // only recorded).
        if job.phase != Phase::Running {
            return;
        }
        if job.is_array() {
            self.task_ended(now, job_id, node, out);
            return;
        }
        // A run's failure is a result like any other: compared with the
        // other runs' once none runs.
        if job.spec.runs > 1 {
            self.decide_runs(now, job_id, out);
            return;
        }
        match outcome {
            RankOutcome::Cancelled => {}
            RankOutcome::Exited(0) => self.complete_if_all_succeeded(job_id, out),
            outcome => self.end_job(
                job_id,
                Phase::Failed,
                RefuseReason::Failed,
                EndReason::RankFailed {
                    rank,
                    node,
                    outcome,
                },
                out,
            ),
        }
    }

    /// A task of job array `job_id` ended (and left the rank table): the
    /// array ends once every task is done or failed for good, completed
    /// if none failed; otherwise, if tasks wait and the job had stopped
    /// looking for cores, it looks again.
    fn task_ended(&mut self, now: Time, job_id: JobId, node: P, out: &mut Vec<Output<P>>) {
        let Some(job) = self.home.get_mut(&job_id) else {
            return;
        };
        let Some(tasks) = job.ranks.tasks() else {
            return;
        };
        // A node a spot check caught is granted nothing more by this home.
        for liar in tasks.caught() {
            if !self.avoided.contains(liar) {
                self.avoided.insert(liar.clone(), now);
            }
        }
        if tasks.over() {
            let counts = tasks.counts(0);
            let first = tasks
                .failed()
                .next()
                .map(|(task, node, outcome)| (task, node.clone(), outcome.clone()));
            let (phase, refuse, reason) = match first {
                None => (
                    Phase::Completed,
                    RefuseReason::JobFull,
                    EndReason::TasksDone {
                        tasks: counts.count,
                        checked: counts.checked,
                        caught: tasks.caught().iter().cloned().collect(),
                    },
                ),
                Some((task, node, outcome)) => (
                    Phase::Failed,
                    RefuseReason::Failed,
                    EndReason::TasksFailed {
                        tasks: counts.count,
                        failed: counts.failed,
                        task,
                        node,
                        outcome,
                    },
                ),
            };
            self.end_job(job_id, phase, refuse, reason, out);
            return;
        }
        job.report.granted = job.granted_workers();
        let wanted = job.usable_workers().saturating_sub(job.granted_workers());
        if wanted == 0 {
            return;
        }
        // Only a check that node gave a result for waits (a check never
        // goes to it): the search starts afresh at once, for another node,
        // rather than at its schedule's next round.
        if !job.ranks.tasks().is_some_and(|t| t.waits_for(&node)) {
            job.flood_afresh(now, wanted);
            return;
        }
        // The node whose task ended has a core free now: it is asked at
        // once, directly (its copy of the advert went when it offered).
        if node != self.id {
            let header = FloodHeader {
                seq: 0,
                ttl: 0,
                latency_budget: None,
                path_rtt: self.known.get(&node).map_or(Duration::ZERO, |k| k.rtt),
            };
            let advert = job.advert(job_id, &self.id, header, now);
            out.push(Output::Send {
                to: node.clone(),
                msg: Message::Advert(advert),
            });
        }
        // A search that stopped (the array was running all it could) or
        // that floods ever more rarely (nothing new answered) starts
        // afresh: cores free up as tasks end, nearest first.
        if job.next_flood_at.is_none() || job.schedule.exhausted() {
            job.flood_afresh(now, wanted);
            // One task for the one core that just freed: the node asked
            // directly answers first, and its grant fills the job again
            // (which stops the search). The search waits for that answer
            // a moment, rather than asking every node for a core at every
            // task's end: short tasks would have homes send more adverts
            // than members take from one home (`DIRECT_ADVERTS_PER_SEC`),
            // and the rest would wait for the next round.
            if node != self.id && wanted == 1 {
                let rtt = self.known.get(&node).map_or(Duration::ZERO, |k| k.rtt);
                let answer = rtt.saturating_mul(2).max(DIRECT_ANSWER_WAIT);
                job.next_flood_at = Some(now.saturating_add(answer));
            }
        }
    }

    /// A running job whose every rank exited with status 0, with at least
    /// its `min` placed, completes.
    pub(super) fn complete_if_all_succeeded(&mut self, job_id: JobId, out: &mut Vec<Output<P>>) {
        let Some(job) = self.home.get(&job_id) else {
            return;
        };
        let workers = job.ranks.placed();
        if job.phase == Phase::Running
            && job.ranks.all_succeeded()
            && workers >= job.spec.workers.min
        {
            self.end_job(
                job_id,
                Phase::Completed,
                RefuseReason::JobFull,
                EndReason::Completed { workers },
                out,
            );
        }
    }

    /// Those of `ranks` (all if `None`) whose workers run on `node` as far
    /// as the home knows are lost (the others ended, were lost before, or
    /// were never there): a rigid job fails, any other has them replaced.
    pub(super) fn ranks_lost(
        &mut self,
        now: Time,
        job_id: JobId,
        node: P,
        ranks: Option<Vec<u32>>,
        reason: LostReason,
        out: &mut Vec<Output<P>>,
    ) {
        let Some(job) = self.home.get_mut(&job_id) else {
            return;
        };
        if job.phase > Phase::Running {
            return;
        }
        let lost = job.ranks.lose(&node, ranks.as_deref(), reason);
        if lost.is_empty() {
            return;
        }
        out.push(Output::Job(JobEvent::WorkersLost {
            job: job_id,
            node: node.clone(),
            ranks: lost.clone(),
            reason,
        }));
        if job.spec.runs > 1 {
            self.run_lost(now, job_id, &lost, reason, out);
            return;
        }
        // An array is never rigid: a lost task runs again by itself.
        let rigid = job.spec.workers.is_rigid() && !job.is_array();
        // A rank given back before it started computed nothing the others
        // depend on (they wait for it at their next exchange): its fresh
        // worker starts from the rank's checkpoint as a replacement does.
        if job.phase == Phase::Running
            && rigid
            && job.spec.on_worker_lost == LostPolicy::Rollback
            && reason != LostReason::Withdrawn
        {
            self.roll_back(now, job_id, out);
            return;
        }
        let replace = !rigid || job.spec.on_worker_lost != LostPolicy::Fail;
        if job.phase == Phase::Running && !replace {
            self.end_job(
                job_id,
                Phase::Failed,
                RefuseReason::Failed,
                EndReason::WorkersLost {
                    node,
                    ranks: lost,
                    reason,
                },
                out,
            );
            return;
        }
        job.report.granted = job.granted_workers();
        // The nodes left learn that the lost ranks are gone (an array's
        // need not know).
        if !job.is_array() {
            job.announce(job_id, Vec::new(), &BTreeSet::new(), out);
        }
        let usable = job.usable_workers();
        if job.phase == Phase::Running && job.granted_workers() < usable {
            // Look for replacements now, with a fresh schedule.
            job.flood_afresh(now, usable);
        }
    }

    /// Workers `lost` of a job that runs more than once were lost: their
    /// runs cannot complete, so the other workers of those runs are
    /// stopped (and count as lost too), and once no worker of the job
    /// runs, the runs that completed decide (see [`crate::runs`]).
    fn run_lost(
        &mut self,
        now: Time,
        job_id: JobId,
        lost: &[u32],
        reason: LostReason,
        out: &mut Vec<Output<P>>,
    ) {
        let Some(job) = self.home.get_mut(&job_id) else {
            return;
        };
        if job.phase == Phase::Running {
            let size = job.run_size();
            let runs: BTreeSet<u32> = lost.iter().map(|w| run_of(*w, size)).collect();
            let mut stop: BTreeMap<P, Vec<u32>> = BTreeMap::new();
            for (w, rank) in job.ranks.iter() {
                if rank.outcome.is_none() && runs.contains(&run_of(w, size)) {
                    stop.entry(rank.node.clone()).or_default().push(w);
                }
            }
            for (node, workers) in stop {
                // No node takes part in two runs: the whole job stops
                // there.
                out.push(Output::Send {
                    to: node.clone(),
                    msg: Message::Refuse {
                        job: job_id,
                        hold: None,
                        reason: RefuseReason::Failed,
                    },
                });
                let also = job.ranks.lose(&node, Some(&workers), reason);
                out.push(Output::Job(JobEvent::WorkersLost {
                    job: job_id,
                    node,
                    ranks: also,
                    reason,
                }));
            }
        }
        self.decide_runs(now, job_id, out);
    }

    /// Once no worker of running job `job_id` (which runs more than once)
    /// runs, decides its results from its runs' digests and ends it (see
    /// [`crate::runs`]); nodes that dissented from a majority are avoided
    /// from now on.
    fn decide_runs(&mut self, now: Time, job_id: JobId, out: &mut Vec<Output<P>>) {
        let Some(job) = self.home.get(&job_id) else {
            return;
        };
        if job.phase != Phase::Running || !job.ranks.running().is_empty() {
            return;
        }
        let runs = u32::from(job.spec.runs);
        let size = job.run_size();
        let mut results: Vec<RunResult<P>> = (0..runs)
            .map(|run| RunResult {
                run,
                nodes: BTreeSet::new(),
                digests: Some(Vec::new()),
            })
            .collect();
        for (w, rank) in job.ranks.iter() {
            let Some(result) = results.get_mut(run_of(w, size) as usize) else {
                continue;
            };
            result.nodes.insert(rank.node.clone());
            let ended = rank
                .outcome
                .as_ref()
                .is_some_and(|o| !matches!(o, RankOutcome::Lost(_)));
            match (ended, rank.digest, &mut result.digests) {
                (true, Some(digest), Some(digests)) => digests.push(digest),
                _ => result.digests = None,
            }
        }
        // A run not placed whole is not complete either.
        for result in &mut results {
            if result
                .digests
                .as_ref()
                .is_some_and(|d| d.len() != size as usize)
            {
                result.digests = None;
            }
        }
        let (phase, refuse, reason) = match decide(&results) {
            Verdict::Kept {
                kept,
                agreed,
                completed,
                dissenters,
            } => {
                let failed = job
                    .ranks
                    .iter()
                    .filter(|(w, _)| run_of(*w, size) == kept)
                    .find_map(|(w, rank)| {
                        let outcome = rank.outcome.as_ref().filter(|o| !o.is_success())?;
                        Some((w % size.max(1), rank.node.clone(), outcome.clone()))
                    });
                for node in &dissenters {
                    self.avoided.insert(node.clone(), now);
                }
                let (phase, refuse) = match failed {
                    None => (Phase::Completed, RefuseReason::JobFull),
                    Some(_) => (Phase::Failed, RefuseReason::Failed),
                };
                let reason = EndReason::RunsKept {
                    runs: runs as u8,
                    kept,
                    agreed,
                    completed,
                    dissenters: dissenters.into_iter().collect(),
                    failed,
                };
                (phase, refuse, reason)
            }
            Verdict::Disagreed { runs: ends } => (
                Phase::Failed,
                RefuseReason::Failed,
                EndReason::RunsDisagreed {
                    runs: runs as u8,
                    ends,
                },
            ),
            Verdict::NoneCompleted => (
                Phase::Failed,
                RefuseReason::Failed,
                EndReason::RunsLost { runs: runs as u8 },
            ),
        };
        self.end_job(job_id, phase, refuse, reason, out);
    }

    /// The driver found every running rank of `job_id` waiting with
    /// nothing in flight (see [`Input::Stalled`](super::Input::Stalled)).
    pub(super) fn stalled(
        &mut self,
        job_id: JobId,
        waited: &BTreeMap<u32, P>,
        out: &mut Vec<Output<P>>,
    ) {
        let Some(job) = self.home.get(&job_id) else {
            return;
        };
        // A replacement or a new worker would wake them (it is announced
        // to every rank).
        let may_grow = !job.spec.workers.is_rigid() && job.granted_workers() < job.spec.workers.max;
        // An array's tasks wait for no one.
        if job.is_array()
            || job.phase != Phase::Running
            || job.ranks.lost().next().is_some()
            || may_grow
        {
            return;
        }
        let running = job.ranks.running();
        if running.is_empty() || running != *waited {
            return;
        }
        let replaced = job
            .ranks
            .replaced()
            .filter(|r| running.contains_key(r))
            .collect();
        let reason = EndReason::Stalled {
            waiting: running.into_keys().collect(),
            replaced,
        };
        self.end_job(job_id, Phase::Failed, RefuseReason::Failed, reason, out);
    }

    pub(super) fn peer_lost(&mut self, now: Time, peer: P, out: &mut Vec<Output<P>>) {
        // First: what the losses below restart or roll back from must be
        // held by a live node.
        self.checkpoints.holder_lost(&peer);
        let jobs: Vec<JobId> = self.home.keys().copied().collect();
        for job_id in jobs {
            let Some(job) = self.home.get_mut(&job_id) else {
                continue;
            };
            job.offers.remove(&peer);
            self.ranks_lost(now, job_id, peer.clone(), None, LostReason::Left, out);
        }
        // Holds for a home that is gone are released; its running workers
        // are the node's business (they may finish and report later).
        let gone: Vec<JobId> = self
            .engaged
            .iter()
            .filter(|(_, e)| e.home == peer && e.running.is_empty())
            .map(|(job, _)| *job)
            .collect();
        for job in gone {
            self.engaged.remove(&job);
        }
        self.pending.retain(|p| p.advert.home != peer);
        self.rescan(now, out);
    }
}
