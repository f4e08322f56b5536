//! The scheduler as a **member**: taking adverts in, offering or
//! declining, holding workers, starting them on a grant, and taking
//! queued adverts again as resources free up.

use super::*;

impl<P: PeerKey> Scheduler<P> {
    /// A member's view of a delivered advert.
    pub(super) fn advert(
        &mut self,
        now: Time,
        advert: Advert<P>,
        distance: Duration,
        out: &mut Vec<Output<P>>,
    ) {
        let job = advert.job;
        // `expires_in` comes from a peer: the driver bounds it when it
        // decodes the advert, and the sum saturates whatever it is.
        let expires_at = now.saturating_add(advert.expires_in);
        if let Some(e) = self.engaged.get(&job) {
            if e.home != advert.home {
                return;
            }
            if e.held > 0 {
                // Already offering for this job: a newer flood finds it
                // still short of workers, so offer what has freed up since.
                self.raise_offer(job, out);
                return;
            }
            // A node that only runs workers of it may offer more (a
            // malleable job growing, a lost rank replaced), within the
            // owner's limit per job.
        }
        if let Some(queued) = self.pending.iter_mut().find(|p| p.advert.job == job) {
            // A newer flood of a queued job: keep the freshest copy, and
            // do not decline again.
            queued.expires_at = expires_at;
            queued.distance = queued.distance.min(distance);
            queued.advert = advert;
            return;
        }
        if self.declined.contains(&job) {
            return;
        }
        let mut answer = self.offer_or_reason(now, &advert, expires_at, distance);
        if answer == Err(DeclineReason::Busy) && self.preempt_for(&advert, now, out) {
            answer = self.offer_or_reason(now, &advert, expires_at, distance);
        }
        match answer {
            Ok(outputs) => out.extend(outputs),
            Err(reason) => {
                let home = advert.home.clone();
                let permanent = matches!(
                    reason,
                    DeclineReason::Denied
                        | DeclineReason::NoWorkersAllowed
                        | DeclineReason::TooLarge
                        | DeclineReason::NotThisUser
                        | DeclineReason::NoNativeJobs
                        | DeclineReason::NativeNotThisUser
                        | DeclineReason::OtherArch
                        | DeclineReason::NoNativeSandbox
                );
                if permanent {
                    self.remember_declined(job);
                } else {
                    self.enqueue(Pending {
                        advert,
                        distance,
                        expires_at,
                    });
                }
                out.push(Output::Send {
                    to: home,
                    msg: Message::Decline { job, reason },
                });
            }
        }
    }

    /// Frees cores for `advert` if its home is a creditor (see
    /// [`crate::favours`]) and they run a job that may be preempted
    /// ([`Advert::preemptible`]) of a home that stands lower (a stranger,
    /// or a smaller creditor), never the owner's own users' jobs: the
    /// workers of the lowest-standing such job, the most recently granted
    /// among equals (the least work lost), stop (`Output::Preempted`) and
    /// its home is told to replace them (a withdrawal). One job at a time,
    /// and only if that frees enough for one of `advert`'s workers.
    /// Returns whether it preempted.
    fn preempt_for(&mut self, advert: &Advert<P>, now: Time, out: &mut Vec<Output<P>>) -> bool {
        if !self.config.fair_share {
            return false;
        }
        let standing = self.favours.balance(&advert.home);
        if standing == 0 {
            return false;
        }
        let free = self.free();
        let users = &self.config.limits.users;
        let victim = self
            .engaged
            .iter()
            .filter(|(job, e)| {
                **job != advert.job
                    && e.preemptible
                    && e.held == 0
                    && !e.running.is_empty()
                    && !users.comes_first(e.owner.as_ref())
                    && self.favours.balance(&e.home) < standing
                    && free
                        .saturating_add(&e.uses())
                        .workers_that_fit(&advert.per_worker)
                        > 0
            })
            .min_by_key(|(job, e)| {
                let newest = e.running.values().max().copied().unwrap_or_default();
                (
                    self.favours.balance(&e.home),
                    std::cmp::Reverse(newest),
                    **job,
                )
            })
            .map(|(job, _)| *job);
        let Some(job) = victim else {
            return false;
        };
        let Some(e) = self.engaged.remove(&job) else {
            return false;
        };
        // The work done so far was a favour all the same.
        for at in e.running.values() {
            let ms = millis(now.saturating_sub(*at));
            self.favours.gave(&e.home, e.per_worker.cores, ms, now);
        }
        out.push(Output::Send {
            to: e.home.clone(),
            msg: Message::Withdraw {
                job,
                hold: e.hold,
                ranks: e.running.keys().copied().collect(),
            },
        });
        out.push(Output::Preempted {
            job,
            for_job: advert.job,
        });
        true
    }

    /// Whether a direct advert from `home` may be taken now (at most
    /// [`DIRECT_ADVERTS_PER_SEC`] per home per second).
    pub(super) fn take_direct(&mut self, home: &P, now: Time) -> bool {
        make_room(
            &mut self.direct_taken,
            home,
            MAX_COUNTED_HOMES,
            |(since, _)| *since,
        );
        let (since, taken) = self.direct_taken.entry(home.clone()).or_insert((now, 0));
        if now.saturating_sub(*since) >= Duration::from_secs(1) {
            *since = now;
            *taken = 0;
        }
        if *taken >= DIRECT_ADVERTS_PER_SEC {
            return false;
        }
        *taken += 1;
        true
    }

    /// Offers workers for `advert` if the node can, or says why not.
    pub(super) fn offer_or_reason(
        &mut self,
        now: Time,
        advert: &Advert<P>,
        expires_at: Time,
        distance: Duration,
    ) -> Result<Vec<Output<P>>, DeclineReason> {
        let limits = &self.config.limits;
        if limits.deny.contains(&advert.home) {
            return Err(DeclineReason::Denied);
        }
        if !limits.users.allows(advert.owner.as_ref()) {
            return Err(DeclineReason::NotThisUser);
        }
        limits.native.check(advert.kind, advert.owner.as_ref())?;
        if limits.max_workers_per_job == 0 {
            return Err(DeclineReason::NoWorkersAllowed);
        }
        if self.config.resources.workers_that_fit(&advert.per_worker) == 0 {
            return Err(DeclineReason::TooLarge);
        }
        let running = self
            .engaged
            .get(&advert.job)
            .map_or(0, |e| e.running.len() as u32);
        let joined = self.engaged.contains_key(&advert.job);
        if !joined && self.engaged.len() as u32 >= limits.max_jobs {
            return Err(DeclineReason::TooManyJobs);
        }
        let of_user = self.user_room(advert.owner.as_ref(), advert.job);
        if !joined && of_user.jobs == 0 {
            return Err(DeclineReason::UserLimit);
        }
        let by_user = of_user.workers(&advert.per_worker);
        if self.paused {
            return Err(DeclineReason::Busy);
        }
        let free = self.free();
        let workers = free
            .workers_that_fit(&advert.per_worker)
            .min(limits.max_workers_per_job.saturating_sub(running))
            .min(advert.workers.max.saturating_sub(running));
        if workers == 0 {
            return Err(DeclineReason::Busy);
        }
        let workers = workers.min(by_user);
        if workers == 0 {
            return Err(DeclineReason::UserLimit);
        }
        let mut residue = free.saturating_sub(&advert.per_worker.times(workers));
        // Busy before this offer: every other hold and every worker.
        let machine = self.machine(free.cores);
        residue.cores = residue.cores.min(machine.cores);
        let held_until = now.saturating_add(self.config.hold_timeout).min(expires_at);
        let engagement = self
            .engaged
            .entry(advert.job)
            .or_insert_with(|| Engagement {
                home: advert.home.clone(),
                owner: advert.owner.clone(),
                per_worker: advert.per_worker,
                hold: HoldId(0),
                held: 0,
                held_since: now,
                held_until,
                wanted: advert.workers.max,
                distance,
                running: BTreeMap::new(),
                preemptible: advert.preemptible,
            });
        if engagement.held == 0 {
            // A new hold. Numbered node-wide, not per job: a job's
            // engagement is dropped when nothing of it is held or runs,
            // and a late answer to a hold of the one before must not
            // match the hold of the next.
            engagement.hold = HoldId(self.next_hold);
            self.next_hold = self.next_hold.wrapping_add(1);
        }
        engagement.wanted = advert.workers.max;
        engagement.distance = distance;
        engagement.held = workers;
        engagement.held_since = now;
        engagement.held_until = held_until;
        Ok(vec![Output::Send {
            to: advert.home.clone(),
            msg: Message::Offer {
                job: advert.job,
                hold: engagement.hold,
                workers,
                distance,
                residue,
                machine,
            },
        }])
    }

    /// Raises a held offer by the workers that have freed up since it was
    /// made (the job's earlier workers ending here, say), up to what the
    /// job and the owner allow. Without this, a rigid job offered only
    /// part of a node would wait out the whole hold for the rest.
    pub(super) fn raise_offer(&mut self, job: JobId, out: &mut Vec<Output<P>>) {
        let free = self.free();
        let max_per_job = self.config.limits.max_workers_per_job;
        let by_user = match self.engaged.get(&job) {
            Some(e) => self
                .user_room(e.owner.as_ref(), job)
                .workers(&e.per_worker)
                .saturating_sub(e.held),
            None => return,
        };
        let Some(e) = self.engaged.get_mut(&job) else {
            return;
        };
        if e.held == 0 {
            return;
        }
        let engaged = e
            .held
            .saturating_add(u32::try_from(e.running.len()).unwrap_or(u32::MAX));
        let extra = free
            .workers_that_fit(&e.per_worker)
            .min(max_per_job.saturating_sub(engaged))
            .min(e.wanted.saturating_sub(engaged))
            .min(by_user);
        if extra == 0 {
            return;
        }
        // Busy apart from this hold: its cores are still counted out of
        // `free`, and are not another job's load.
        let own = e.per_worker.times(e.held).cores;
        e.held = e.held.saturating_add(extra);
        let mut residue = free.saturating_sub(&e.per_worker.times(extra));
        let (home, hold, held, distance) = (e.home.clone(), e.hold, e.held, e.distance);
        let machine = self.machine(free.cores.saturating_add(own));
        residue.cores = residue.cores.min(machine.cores);
        out.push(Output::Send {
            to: home,
            msg: Message::Offer {
                job,
                hold,
                workers: held,
                distance,
                residue,
                machine,
            },
        });
    }

    /// What the node's owner still lets `owner` have here besides what
    /// `job` holds now (its running workers count): jobs, and cores.
    fn user_room(&self, owner: Option<&P>, job: JobId) -> UserRoom {
        let limits = self.config.limits.users.limits_of(owner);
        let (mut jobs, mut cores) = (0u32, 0u32);
        for (j, e) in &self.engaged {
            if e.owner.as_ref() != owner {
                continue;
            }
            let running = u32::try_from(e.running.len()).unwrap_or(u32::MAX);
            if *j == job {
                cores = cores.saturating_add(e.per_worker.cores.saturating_mul(running));
            } else {
                jobs = jobs.saturating_add(1);
                cores = cores.saturating_add(e.uses().cores);
            }
        }
        UserRoom {
            jobs: limits.max_jobs.saturating_sub(jobs),
            cores: limits.max_cores.saturating_sub(cores),
        }
    }

    /// What an offer says of this machine when `free` of its cores are
    /// neither running workers nor held for other offers. Within the
    /// limits a home checks ([`limits::check_machine`]) whatever the
    /// configuration says: a larger machine says the most cores, its
    /// busy ones and the residue's cores counted within them.
    fn machine(&self, free: u32) -> Machine {
        let cores = self.config.resources.cores;
        let said = cores.min(limits::MAX_NODE_CORES);
        Machine {
            cores: said,
            busy: cores.saturating_sub(free).min(said),
            speed: self.config.speed.clamp(1, limits::MAX_SPEED),
            reach: self.reachability,
        }
    }

    pub(super) fn enqueue(&mut self, entry: Pending<P>) {
        if self.pending.len() >= self.config.pending_capacity {
            // Full: the advert that expires soonest makes room, unless the
            // new one expires no later (see `pending_capacity`).
            let soonest = self
                .pending
                .iter()
                .enumerate()
                .min_by_key(|(_, p)| p.expires_at)
                .map(|(i, p)| (i, p.expires_at));
            match soonest {
                Some((i, at)) if at < entry.expires_at => {
                    self.pending.remove(i);
                }
                _ => return,
            }
        }
        self.pending.push_back(entry);
    }

    pub(super) fn remember_declined(&mut self, job: JobId) {
        if self.declined.len() >= self.config.declined_capacity {
            self.declined.pop_front();
        }
        self.declined.push_back(job);
    }

    /// Resources freed up (workers ended, a hold was refused or timed
    /// out): raise the offers held for jobs, then take queued adverts that
    /// can now be served, oldest first, while resources last.
    pub(super) fn rescan(&mut self, now: Time, out: &mut Vec<Output<P>>) {
        // Held offers come before queued adverts: their jobs were here
        // first. Without raising them, a job that holds part of this node
        // is granted farther nodes while the rest of this one sits free,
        // or waits for its next flood. A raised offer that its home refuses
        // frees cores again and raises the others: at most one more message
        // per hold, as every refusal ends one (measured on 200 generated
        // topologies: 0.4% more messages per job at the median).
        let held: Vec<JobId> = self
            .engaged
            .iter()
            .filter(|(_, e)| e.held > 0)
            .map(|(job, _)| *job)
            .collect();
        for job in held {
            self.raise_offer(job, out);
        }
        self.pending.retain(|p| p.expires_at > now);
        let mut taken = Vec::new();
        for i in self.turns() {
            let entry = &self.pending[i];
            let advert = entry.advert.clone();
            let distance = entry.distance;
            let expires_in = entry.expires_at.saturating_sub(now);
            let advert = Advert {
                expires_in,
                ..advert
            };
            let expires_at = entry.expires_at;
            if let Ok(outputs) = self.offer_or_reason(now, &advert, expires_at, distance) {
                out.extend(outputs);
                taken.push(i);
            }
        }
        taken.sort_unstable();
        for i in taken.into_iter().rev() {
            self.pending.remove(i);
        }
    }

    /// The order in which queued adverts get the cores that freed up:
    /// the owner's own users' jobs first ([`UserPolicy::first`]), then the
    /// rest; each group by the favours the jobs' homes did this node
    /// ([`crate::favours::turns`]), each home's jobs in queue order
    /// ([`Scheduler::by_priority`]).
    /// Indices into `pending`.
    fn turns(&mut self) -> Vec<usize> {
        self.by_priority();
        let users = &self.config.limits.users;
        let homes: Vec<&P> = self.pending.iter().map(|p| &p.advert.home).collect();
        // Without fair sharing every balance counts as zero: queue order.
        let favours = self.config.fair_share.then_some(&self.favours);
        let mut order =
            crate::favours::turns(&homes, |home| favours.map_or(0, |f| f.balance(home)));
        // Stable: the favours' order within each group.
        order.sort_by_key(|&i| !users.comes_first(self.pending[i].advert.owner.as_ref()));
        order
    }

    /// Puts each user's queued adverts in that user's places in the queue
    /// by priority (higher first, oldest first among equals), so that a
    /// user's priorities reorder only that user's jobs: a job that goes
    /// ahead of its user's earlier one takes that one's turn, and the
    /// earlier one waits in its place, behind other users' jobs it was
    /// ahead of.
    fn by_priority(&mut self) {
        let mut places: BTreeMap<Option<&P>, Vec<usize>> = BTreeMap::new();
        for (i, entry) in self.pending.iter().enumerate() {
            places
                .entry(entry.advert.owner.as_ref())
                .or_default()
                .push(i);
        }
        // `order[place]`: the entry that goes to `place`.
        let mut order: Vec<usize> = (0..self.pending.len()).collect();
        for slots in places.values() {
            let mut jobs = slots.clone();
            // Stable: oldest first among equal priorities.
            jobs.sort_by_key(|&i| std::cmp::Reverse(self.pending[i].advert.priority));
            for (&place, job) in slots.iter().zip(jobs) {
                order[place] = job;
            }
        }
        if order.iter().enumerate().all(|(place, &job)| place == job) {
            return;
        }
        // A permutation: every entry is taken exactly once.
        let mut entries: Vec<Option<Pending<P>>> = self.pending.drain(..).map(Some).collect();
        self.pending = order
            .into_iter()
            .filter_map(|job| entries[job].take())
            .collect();
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn grant_received(
        &mut self,
        now: Time,
        from: P,
        job: JobId,
        hold: HoldId,
        ranks: Vec<u32>,
        incarnation: u32,
        placement: BTreeMap<u32, Placed<P>>,
        out: &mut Vec<Output<P>>,
    ) {
        let fits = match self.engaged.get_mut(&job) {
            Some(e) if e.home == from && e.hold == hold && e.held as usize >= ranks.len() => {
                // The part of the hold not granted is released.
                e.held = 0;
                e.running.extend(ranks.iter().map(|r| (*r, now)));
                true
            }
            _ => false,
        };
        if fits {
            out.push(Output::StartWorkers {
                job,
                home: from,
                ranks,
                incarnation,
                placement,
            });
            self.rescan(now, out);
        } else {
            // The hold is gone (timed out, or the job's next hold is
            // another): tell the home so that it finds the workers
            // elsewhere.
            out.push(Output::Send {
                to: from,
                msg: Message::Withdraw { job, hold, ranks },
            });
        }
    }
}

/// What one user may still have on a node (see [`Scheduler::user_room`]).
#[derive(Debug, Clone, Copy)]
struct UserRoom {
    /// More jobs.
    jobs: u32,
    /// More cores.
    cores: u32,
}

impl UserRoom {
    /// How many more workers of `per_worker` fit in the user's cores.
    fn workers(self, per_worker: &Resources) -> u32 {
        self.cores.checked_div(per_worker.cores).unwrap_or(u32::MAX)
    }
}
