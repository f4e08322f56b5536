//! Several schedulers wired together: gangs sharing nodes, owner limits
//! across jobs, and lost workers replaced through new floods.

use super::*;

/// A few schedulers wired together with instant delivery; adverts are
/// delivered by hand so that the test decides who hears which flood first.
struct Net {
    nodes: BTreeMap<u32, Scheduler<u32>>,
    /// Every output other than a delivered message, and every message sent,
    /// with the node it came from.
    log: Vec<(u32, Output<u32>)>,
}

impl Net {
    fn input(&mut self, now: Duration, node: u32, input: Input<u32>) {
        let out = self.nodes.get_mut(&node).unwrap().handle(now, input);
        self.route(now, node, out);
    }

    fn timeout(&mut self, now: Duration, node: u32) {
        let out = self.nodes.get_mut(&node).unwrap().handle_timeout(now);
        self.route(now, node, out);
    }

    fn route(&mut self, now: Duration, from: u32, out: Vec<Output<u32>>) {
        for output in out {
            self.log.push((from, output.clone()));
            if let Output::Send { to, msg } = output {
                let input = Input::Message {
                    from,
                    msg,
                    rtt: Some(ms(u64::from(from % 10) + 1)),
                };
                self.input(now, to, input);
            }
        }
    }

    /// The advert of the last flood of `job`.
    fn flood(&self, job: JobId) -> Advert<u32> {
        self.log
            .iter()
            .rev()
            .find_map(|(_, o)| match o {
                Output::Flood(advert) if advert.job == job => Some(advert.clone()),
                _ => None,
            })
            .unwrap()
    }

    fn deliver(&mut self, now: Duration, node: u32, advert: Advert<u32>) {
        let input = Input::AdvertDelivered {
            advert,
            distance: ms(1),
        };
        self.input(now, node, input);
    }

    fn holds(&self, node: u32) -> Vec<(JobId, u32, Duration)> {
        self.nodes[&node]
            .holds()
            .map(|h| (h.job, h.workers, h.until))
            .collect()
    }

    fn started(&self, job: JobId) -> Vec<(u32, Vec<u32>)> {
        self.log
            .iter()
            .filter_map(|(node, o)| match o {
                Output::StartWorkers { job: j, ranks, .. } if *j == job => {
                    Some((*node, ranks.clone()))
                }
                _ => None,
            })
            .collect()
    }

    fn sent(&self, from: u32, msg: &Message<u32>) -> bool {
        self.log
            .iter()
            .any(|(node, o)| *node == from && matches!(o, Output::Send { msg: m, .. } if m == msg))
    }
}

#[test]
fn two_gangs_holding_parts_of_the_same_nodes_both_get_their_workers() {
    const HX: u32 = 100;
    const HY: u32 = 200;
    const X: JobId = JobId(1);
    const Y: JobId = JobId(2);
    let mut nodes = BTreeMap::new();
    for home in [HX, HY] {
        nodes.insert(
            home,
            Scheduler::new(
                home,
                SchedulerConfig {
                    resources: Resources::ZERO,
                    schedule: ScheduleConfig::paper(),
                    ..SchedulerConfig::default()
                },
            ),
        );
    }
    for member in [1, 2] {
        nodes.insert(
            member,
            Scheduler::new(
                member,
                SchedulerConfig {
                    resources: Resources::new(2, 4096, 4096),
                    hold_timeout: ms(500),
                    ..SchedulerConfig::default()
                },
            ),
        );
    }
    let mut net = Net {
        nodes,
        log: Vec::new(),
    };
    // Two rigid jobs of 3 workers on two 2-core nodes: each node hears a
    // different job first and holds both its cores for it.
    net.input(
        ms(0),
        HX,
        Input::Submit {
            owner: None,
            job: X,
            spec: net.nodes[&HX].admit(spec(WorkerCount::rigid(3))).unwrap(),
        },
    );
    net.input(
        ms(0),
        HY,
        Input::Submit {
            owner: None,
            job: Y,
            spec: net.nodes[&HY].admit(spec(WorkerCount::rigid(3))).unwrap(),
        },
    );
    net.deliver(ms(0), 1, net.flood(X));
    net.deliver(ms(100), 2, net.flood(Y));
    net.deliver(ms(100), 1, net.flood(Y));
    net.deliver(ms(100), 2, net.flood(X));
    assert_eq!(net.holds(1), vec![(X, 2, ms(500))]);
    assert_eq!(net.holds(2), vec![(Y, 2, ms(600))]);
    assert_eq!(net.nodes[&1].pending().count(), 1, "node 1 queued Y");
    assert_eq!(net.nodes[&2].pending().count(), 1, "node 2 queued X");
    // Neither gang can complete (2 of 3 each).
    assert_eq!(net.nodes[&HX].phase(X), Some(Phase::Scheduling));
    assert_eq!(net.nodes[&HY].phase(Y), Some(Phase::Scheduling));
    assert_eq!(net.nodes[&1].next_timeout(), Some(ms(500)));

    // Node 1's hold outlives nothing: at 500 ms it withdraws from X and
    // offers its cores to the queued Y, which completes Y's gang.
    net.timeout(ms(500), 1);
    assert!(net.sent(
        1,
        &Message::Withdraw {
            hold: HoldId(0),
            job: X,
            ranks: vec![]
        }
    ));
    assert_eq!(net.nodes[&HY].phase(Y), Some(Phase::Running));
    assert_eq!(net.started(Y), vec![(1, vec![0, 1]), (2, vec![2])]);
    // Node 2 runs one of Y and offered its last core to the queued X, which
    // let node 1 go.
    assert_eq!(net.holds(2), vec![(X, 1, ms(1000))]);
    assert_eq!(
        net.nodes[&HX].held_offers(X).collect::<Vec<_>>(),
        vec![(&2, 1)]
    );

    // That hold, too, ends at its timeout.
    net.timeout(ms(1000), 2);
    assert!(net.sent(
        2,
        &Message::Withdraw {
            hold: HoldId(1),
            job: X,
            ranks: vec![]
        }
    ));
    assert!(net.holds(2).is_empty());
    assert_eq!(net.nodes[&HX].held_offers(X).count(), 0);

    // Y finishes; the nodes are free and hold nothing: X's next flood gets
    // its whole gang.
    net.input(
        ms(2000),
        1,
        Input::WorkersEnded {
            job: Y,
            ranks: vec![0, 1],
        },
    );
    net.input(
        ms(2000),
        2,
        Input::WorkersEnded {
            job: Y,
            ranks: vec![2],
        },
    );
    // Their ends reach Y's home, which completes Y.
    let placed: Vec<(u32, u32, u32)> = net.nodes[&HY]
        .ranks(Y)
        .unwrap()
        .iter()
        .map(|(rank, r)| (rank, r.node, r.incarnation))
        .collect();
    for (rank, node, incarnation) in placed {
        let end = Input::RankEnded {
            digest: None,
            job: Y,
            node,
            rank,
            incarnation,
            end: WorkerEnd::Exited(0),
        };
        net.input(ms(2000), HY, end);
    }
    assert_eq!(net.nodes[&HY].phase(Y), Some(Phase::Completed));
    for member in [1, 2] {
        assert_eq!(net.nodes[&member].free().cores, 2);
        assert!(net.holds(member).is_empty());
    }
    net.timeout(ms(3000), HX);
    let flood = net.flood(X);
    assert!(flood.flood.seq >= 1, "a later flood of X");
    net.deliver(ms(3000), 1, flood.clone());
    net.deliver(ms(3000), 2, flood);
    assert_eq!(net.nodes[&HX].phase(X), Some(Phase::Running));
    assert_eq!(net.started(X), vec![(1, vec![0, 1]), (2, vec![2])]);
    assert!(net.holds(1).is_empty() && net.holds(2).is_empty());
}

/// The floods `out` starts, by sequence number.
fn flood_seqs(out: &[Output<u32>]) -> Vec<u32> {
    out.iter()
        .filter_map(|o| match o {
            Output::Flood(advert) => Some(advert.flood.seq),
            _ => None,
        })
        .collect()
}

#[test]
fn a_member_running_workers_of_a_job_offers_more_within_the_owner_limit() {
    let mut node = Scheduler::new(
        1u32,
        SchedulerConfig {
            resources: Resources::new(4, 4096, 4096),
            limits: OwnerLimits {
                max_workers_per_job: 3,
                ..OwnerLimits::default()
            },
            ..SchedulerConfig::default()
        },
    );
    let job = WorkerCount { min: 1, max: 6 };
    let out = deliver(&mut node, ms(0), job);
    assert!(matches!(
        out[..],
        [Output::Send {
            msg: Message::Offer { workers: 3, .. },
            ..
        }]
    ));
    from_home(&mut node, ms(1), grant(JOB, vec![0], 3));
    assert_eq!(node.free().cores, 3);
    // A later flood (a replacement, or the job growing): two more within
    // P = 3, though three cores are free.
    let out = deliver(&mut node, ms(10), job);
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Offer {
                hold: HoldId(1),
                job: JOB,
                workers: 2,
                distance: ms(1),
                residue: Resources::new(1, 4096 - 300, 4096),
                // Rank 0 of the job runs here.
                machine: machine(4, 1),
            }
        }]
    );
    assert_eq!(deliver(&mut node, ms(11), job), vec![], "offered already");
    // The hold times out: withdrawn with no ranks, and rank 0 runs on.
    let out = node.handle_timeout(ms(10) + SchedulerConfig::<u32>::default().hold_timeout);
    assert_eq!(
        out,
        vec![Output::Send {
            to: HOME,
            msg: Message::Withdraw {
                hold: HoldId(1),
                job: JOB,
                ranks: vec![]
            }
        }]
    );
    assert_eq!(
        node.running()
            .map(|(job, ranks)| (job, ranks.copied().collect::<Vec<_>>()))
            .collect::<Vec<_>>(),
        vec![(JOB, vec![0])]
    );
    let out = deliver(&mut node, ms(40_000), job);
    assert!(matches!(
        out[..],
        [Output::Send {
            msg: Message::Offer { workers: 2, .. },
            ..
        }]
    ));
    let out = from_home(&mut node, ms(40_001), grant_of_hold(2, JOB, vec![3, 4], 3));
    assert_eq!(
        out,
        vec![Output::StartWorkers {
            job: JOB,
            home: HOME,
            ranks: vec![3, 4],
            incarnation: 3,
            placement: placed_on(&[3, 4], 1, 3),
        }]
    );
    // P reached: busy for this job (queued, so it may offer again once a
    // worker ends), one core still free.
    assert_eq!(
        deliver(&mut node, ms(40_010), job),
        vec![Output::Send {
            to: HOME,
            msg: Message::Decline {
                job: JOB,
                reason: DeclineReason::Busy
            }
        }]
    );
    assert_eq!(node.free().cores, 1);
}

#[test]
fn a_lost_worker_is_replaced_on_a_node_already_running_the_job_by_a_new_flood() {
    let mut node = home(ScheduleConfig::paper());
    let out = submit(&mut node, ms(0), WorkerCount { min: 2, max: 3 });
    let mut seqs = flood_seqs(&out);
    offer_from(&mut node, ms(1), 10, 2, 1);
    let out = offer_from(&mut node, ms(2), 11, 1, 2);
    assert!(out.contains(&Output::Job(JobEvent::Full { job: JOB })));
    assert_eq!(
        node.placement(JOB),
        Some([(10, vec![0, 1]), (11, vec![2])].into_iter().collect())
    );
    // Node 11 is lost; the only free core is on node 10, which runs ranks
    // 0 and 1 and answers the replacement flood.
    let out = node.handle(ms(3), Input::PeerLost(11));
    let again = flood_seqs(&out);
    assert_eq!(again.len(), 1, "{out:?}");
    assert!(
        !seqs.contains(&again[0]),
        "flood {again:?} is new, not a copy of {seqs:?} that the nodes' duplicate caches drop"
    );
    seqs.extend(again);
    let out = new_offer_from(&mut node, ms(4), 10, 1, 1, 1);
    assert!(granted(&out, 10, vec![2], 2), "{out:?}");
    assert_eq!(
        node.placement(JOB),
        Some([(10, vec![0, 1, 2])].into_iter().collect())
    );
    // A grant that reached node 10 after its hold ended is withdrawn with
    // its ranks: only those are lost, not the ranks node 10 ran before.
    let out = node.handle(
        ms(5),
        Input::Message {
            from: 10,
            msg: Message::Withdraw {
                hold: HoldId(1),
                job: JOB,
                ranks: vec![2],
            },
            rtt: None,
        },
    );
    assert!(out.contains(&Output::Job(JobEvent::WorkersLost {
        job: JOB,
        node: 10,
        ranks: vec![2],
        reason: LostReason::Withdrawn,
    })));
    assert_eq!(
        node.placement(JOB),
        Some([(10, vec![0, 1])].into_iter().collect())
    );
    // A plain withdrawal (an offer's hold timed out) loses nothing.
    let out = node.handle(
        ms(6),
        Input::Message {
            from: 10,
            msg: Message::Withdraw {
                hold: HoldId(2),
                job: JOB,
                ranks: vec![],
            },
            rtt: None,
        },
    );
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Job(JobEvent::WorkersLost { .. }))),
        "{out:?}"
    );
    assert_eq!(node.phase(JOB), Some(Phase::Running));
}

#[test]
fn ranks_lost_count_once_and_a_rigid_job_fails_naming_why() {
    let mut node = home_running_one_worker_on_10();
    assert_eq!(node.phase(JOB), Some(Phase::Running));
    // Not granted there: nothing happens.
    let out = node.handle(
        ms(2),
        Input::RanksLost {
            job: JOB,
            node: 11,
            ranks: vec![0],
            cause: LostCause::NotRunning,
        },
    );
    assert_eq!(out, vec![]);
    let out = node.handle(
        ms(3),
        Input::RanksLost {
            job: JOB,
            node: 10,
            ranks: vec![0],
            cause: LostCause::Restarted,
        },
    );
    let reason = LostReason::Liveness(LostCause::Restarted);
    assert!(out.contains(&Output::Job(JobEvent::WorkersLost {
        job: JOB,
        node: 10,
        ranks: vec![0],
        reason,
    })));
    let ended = EndReason::WorkersLost {
        node: 10,
        ranks: vec![0],
        reason,
    };
    assert_eq!(
        ended.to_string(),
        "a worker was lost and the job is rigid: node 10 restarted and forgot it (rank 0)"
    );
    assert!(
        out.contains(&Output::Job(JobEvent::Ended {
            job: JOB,
            phase: Phase::Failed,
            reason: ended,
        })),
        "{out:?}"
    );
    // Once only.
    let out = node.handle(
        ms(4),
        Input::RanksLost {
            job: JOB,
            node: 10,
            ranks: vec![0],
            cause: LostCause::Silent,
        },
    );
    assert_eq!(out, vec![]);
}

#[test]
fn a_rigid_job_replacing_lost_workers_gets_its_rank_back_on_the_same_node() {
    let mut node = home(ScheduleConfig::paper());
    node.handle(
        ms(0),
        Input::Submit {
            owner: None,
            job: JOB,
            spec: node
                .admit(JobSpec {
                    runs: 1,
                    on_worker_lost: LostPolicy::Replace,
                    ..spec(WorkerCount::rigid(2))
                })
                .unwrap(),
        },
    );
    offer_from(&mut node, ms(1), 10, 2, 1);
    let out = node.handle(
        ms(2),
        Input::RanksLost {
            job: JOB,
            node: 10,
            ranks: vec![1],
            cause: LostCause::NotRunning,
        },
    );
    assert_eq!(flood_seqs(&out), vec![1], "{out:?}");
    let out = new_offer_from(&mut node, ms(3), 10, 1, 1, 1);
    assert!(granted(&out, 10, vec![1], 1));
    assert_eq!(node.phase(JOB), Some(Phase::Running));
}

/// A member raises its offer (a core freed up) while the grant that uses
/// the offer is on its way to it. The home does not refuse the raise: the
/// refusal could overtake the grant (a few bytes against the job's module,
/// and a grant waits until a copy of the job holds it), and a member that
/// took it first would give the granted rank back, failing a rigid job.
/// The grant releases the rest of the hold.
#[test]
fn a_raise_crossing_the_grant_of_its_hold_is_not_refused() {
    let mut node = member(2);
    other_job_takes_a_core(&mut node);
    from_home(&mut node, ms(1), grant(JobId(99), vec![0], 3));
    let out = deliver(&mut node, ms(2), WorkerCount::rigid(2));
    let [Output::Send { msg: offer, .. }] = &out[..] else {
        panic!("{out:?}");
    };
    let mut home = home(ScheduleConfig::paper());
    submit(&mut home, ms(0), WorkerCount::rigid(2));
    offer_from(&mut home, ms(2), 10, 1, 1);
    let message = |msg: &Message<u32>| Input::Message {
        from: 1,
        msg: msg.clone(),
        rtt: Some(ms(1)),
    };
    let out = home.handle(ms(3), message(offer));
    let grant = out
        .iter()
        .find_map(|o| match o {
            Output::Send {
                to: 1,
                msg: m @ Message::Grant { .. },
            } => Some(m.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("node 1 granted: {out:?}"));
    // Job 99's worker ends before the grant arrives: the member raises.
    let out = node.handle(
        ms(4),
        Input::WorkersEnded {
            job: JobId(99),
            ranks: vec![0],
        },
    );
    let [
        Output::Send {
            msg: raise @ Message::Offer { workers: 2, .. },
            ..
        },
    ] = &out[..]
    else {
        panic!("{out:?}");
    };
    assert_eq!(
        home.handle(ms(5), message(raise)),
        vec![],
        "nothing to overtake the grant"
    );
    let out = from_home(&mut node, ms(6), grant);
    assert!(
        matches!(&out[..], [Output::StartWorkers { ranks, .. }] if ranks.len() == 1),
        "{out:?}"
    );
    assert_eq!(node.free().cores, 1, "the rest of the hold is released");
}

/// A withdrawal of a node's earlier hold that arrives after the node's
/// newer offer leaves the newer offer held.
#[test]
fn a_late_withdrawal_of_an_earlier_hold_keeps_the_newer_offer() {
    let mut node = home(ScheduleConfig::paper());
    submit(&mut node, ms(0), WorkerCount::rigid(3));
    new_offer_from(&mut node, ms(1), 10, 1, 1, 1);
    let withdraw = |hold| Input::Message {
        from: 10,
        msg: Message::Withdraw {
            job: JOB,
            hold: HoldId(hold),
            ranks: vec![],
        },
        rtt: None,
    };
    node.handle(ms(2), withdraw(0));
    assert_eq!(node.held_offers(JOB).collect::<Vec<_>>(), vec![(&10, 1)]);
    node.handle(ms(3), withdraw(1));
    assert_eq!(node.held_offers(JOB).count(), 0);
}
