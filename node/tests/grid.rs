//! End-to-end tests: real `zorilla-node` processes on 127.0.0.1 (ports
//! chosen by the OS, temp state directories), driven through the client
//! library. Every wait has a deadline; nothing sleeps a fixed time to let
//! things happen. The key ones (joining, a parallel job, locality across
//! sites, a worker node killed) run twice: on loopback, and on separate
//! hosts in network namespaces of their own (`..._on_hosts`, see
//! `common::netns`; needs root).

mod common;

use std::time::{Duration, Instant};

use common::{
    Net, grid, grid_on, host_ip, nqueens, sites_grid, stdout_of, wait_all_measured, wait_completed,
    wait_for, wait_for_neighbours, wait_idle, wait_nodes, wasm,
};
use zorilla_node::protocol::{JobPhase, JobRequest};

/// Five nodes joined through the first: each comes to know every other
/// one and measures its RTT (a connection was made both ways or one), and
/// keeps for it only addresses it can reach: on separate hosts, never a
/// loopback address of another host.
async fn nodes_join(net: Net) {
    let grid = grid_on(net, 5, 1);
    let start = Instant::now();
    let lists = wait_all_measured(&grid.nodes, Duration::from_secs(60)).await;
    if net == Net::Hosts {
        for (node, peers) in grid.nodes.iter().zip(&lists) {
            for p in peers {
                assert!(
                    !p.addrs.is_empty() && p.addrs.iter().all(|a| a.starts_with("/ip4/10.77.")),
                    "{} keeps the addresses {:?} for {}",
                    node.peer,
                    p.addrs,
                    p.peer
                );
            }
        }
    }
    eprintln!(
        "{net:?}: 5 nodes knew and measured each other after {:?}",
        start.elapsed()
    );
}

/// The hosts' namespaces go when the test panics (their guard's drop), and
/// hosts of two sites reach each other through the router, not only
/// within a site.
#[test]
fn namespace_hosts_route_between_sites_and_are_deleted_when_a_test_panics() {
    let names = std::sync::Mutex::new(Vec::new());
    let outcome = std::panic::catch_unwind(|| {
        let hosts = common::netns::Hosts::new(&[1, 1]);
        names
            .lock()
            .unwrap()
            .extend(hosts.namespaces().iter().cloned());
        let [a, b] = [&hosts.hosts[0], &hosts.hosts[1]];
        assert_ne!(a.site, b.site);
        // b listens, a connects from its own namespace through the router.
        let listener = std::thread::scope(|s| {
            s.spawn(|| {
                let path = format!("/run/netns/{}", b.netns);
                let ns = std::fs::File::open(path).unwrap();
                rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&ns),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .unwrap();
                std::net::TcpListener::bind((b.ip, 0)).unwrap()
            })
            .join()
            .unwrap()
        });
        let addr = listener.local_addr().unwrap();
        let stream = common::netns::connect_in(&a.netns, addr).unwrap();
        let (_, from) = listener.accept().unwrap();
        assert_eq!(from.ip(), std::net::IpAddr::V4(a.ip), "{stream:?}");
        // Unwinds as a failed assertion would (without the panic hook's
        // message, which would read as a failure).
        std::panic::resume_unwind(Box::new("the test fails here"));
    });
    assert!(outcome.is_err());
    let names = names.into_inner().unwrap();
    assert_eq!(names.len(), 5, "router, 2 sites, 2 hosts: {names:?}");
    for name in names {
        assert!(
            !std::path::Path::new("/run/netns").join(&name).exists(),
            "{name} is left behind"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_and_measure_each_other() {
    nodes_join(Net::Loopback).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_and_measure_each_other_on_hosts() {
    nodes_join(Net::Hosts).await;
}

/// 8 nodes of one core each, in two sites of 4: nqueens with 8 workers
/// lands on all of them, the answer and every log arrive at the home; then
/// the home is killed (-9) and restarted and still has the job and its
/// outputs.
async fn nqueens_on_eight_nodes(net: Net) {
    let mut grid = sites_grid(net, &[4, 4], 1, |_| Vec::new());
    let mut client = grid.nodes[0].client().await;
    let job = client
        .submit(nqueens(8, 12), wasm("nqueens"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
    assert_eq!(status.ranks.len(), 8);
    let nodes: std::collections::BTreeSet<&String> =
        status.ranks.values().map(|r| &r.node).collect();
    assert_eq!(nodes.len(), 8, "one worker per one-core node: {status:?}");
    let logs = client.logs(job).await.unwrap();
    let out = stdout_of(&logs);
    assert!(
        out.contains("nqueens N=12 ranks=8 solutions=14200"),
        "{out:?}"
    );

    // kill -9 and restart the home: the job and its logs are still there.
    grid.nodes[0].restart();
    let mut client = grid.nodes[0].client().await;
    let again = client.status(job).await.unwrap();
    assert_eq!(again.phase, JobPhase::Completed);
    assert_eq!(again.ranks, status.ranks);
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(out.contains("solutions=14200"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nqueens_on_eight_nodes_then_home_restart() {
    nqueens_on_eight_nodes(Net::Loopback).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nqueens_on_eight_nodes_then_home_restart_on_hosts() {
    nqueens_on_eight_nodes(Net::Hosts).await;
}

/// A job needing more workers than the grid has waits with a reason, then
/// expires with one; a bad module is refused at submit with a clear error
/// and the node keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_job_pends_then_expires_and_bad_input_is_refused() {
    let grid = grid(2, 1);
    let mut client = grid.nodes[0].client().await;
    let mut request = nqueens(5, 8);
    request.lifetime_secs = 3;
    let job = client
        .submit(request, wasm("nqueens"), vec![])
        .await
        .unwrap();
    let pending = wait_for(
        &mut client,
        job,
        Duration::from_secs(10),
        "a pending reason",
        |s| s.phase == JobPhase::Scheduling && s.reason.contains("of 5 workers granted"),
    )
    .await;
    assert!(pending.reason.starts_with("pending"), "{pending:?}");
    let ended = wait_for(&mut client, job, Duration::from_secs(15), "expiry", |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(ended.phase, JobPhase::Failed, "{ended:?}");
    assert!(ended.reason.contains("expired"), "{ended:?}");

    let err = client
        .submit(nqueens(1, 8), b"not wasm at all".to_vec(), vec![])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("module refused"), "{err}");
    let mut bad = nqueens(1, 8);
    bad.min_workers = 0;
    let err = client
        .submit(bad, wasm("nqueens"), vec![])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at least one worker"), "{err}");
    assert!(client.status(12345).await.is_err());
    // Still serving.
    assert_eq!(client.list().await.unwrap().len(), 1);
}

/// Cancelling a running job stops every worker on every node within a
/// couple of seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_every_worker_quickly() {
    let grid = grid(4, 1);
    let mut client = grid.nodes[0].client().await;
    // `spin` loops for ever: only a cancel ends it.
    let mut request = nqueens(4, 0);
    request.args.clear();
    let job = client.submit(request, wasm("spin"), vec![]).await.unwrap();
    wait_for(&mut client, job, Duration::from_secs(30), "running", |s| {
        s.phase == JobPhase::Running && s.ranks.len() == 4
    })
    .await;
    // Every node reports its worker running.
    for node in &grid.nodes {
        let mut c = node.client().await;
        let start = Instant::now();
        while !c.node_info().await.unwrap().running.contains_key(&job) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "worker never ran on {}",
                node.peer
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let cancelled_at = Instant::now();
    let status = client.cancel(job).await.unwrap();
    assert_eq!(status.phase, JobPhase::Cancelled);
    for node in &grid.nodes {
        let mut c = node.client().await;
        while c.node_info().await.unwrap().running.contains_key(&job) {
            assert!(
                cancelled_at.elapsed() < Duration::from_secs(2),
                "a worker still runs on {} after 2 s",
                node.peer
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Three emulated sites of 4 two-core nodes (1 ms RTT within a site, 60 ms
/// from a to b, 150 ms from c to either; gaps wide enough that a loaded
/// machine's scheduling delays, tens of ms, cannot reorder the sites): a
/// job that fits in the submitter's
/// site runs there only; a larger one spills to the nearest other site
/// before the farthest.
async fn three_sites(net: Net) {
    let topology_dir = tempfile::tempdir().unwrap();
    let sites = ["a", "b", "c"];
    // Each site its own addresses (on loopback, all of 127/8 is loopback),
    // so the ports stay 0: a port picked in advance can be taken by
    // another test before the node binds it.
    let mut topology = String::from(
        "default_rtt_ms = 150\n\
         [[sites]]\nname = \"a\"\nrtt_within_ms = 1\n\
         [[sites]]\nname = \"b\"\nrtt_within_ms = 1\n\
         [[sites]]\nname = \"c\"\nrtt_within_ms = 1\n\
         [[links]]\na = \"a\"\nb = \"b\"\nrtt_ms = 60\n\
         [hosts]\n",
    );
    for i in 0..12 {
        let ip = host_ip(net, i / 4, i % 4);
        topology.push_str(&format!("\"{ip}\" = \"{}\"\n", sites[i / 4]));
    }
    let topology_file = topology_dir.path().join("sites.toml");
    std::fs::write(&topology_file, topology).unwrap();
    let grid = sites_grid(net, &[4, 4, 4], 2, |i| {
        vec![
            "--topology".to_string(),
            topology_file.display().to_string(),
            "--site".into(),
            sites[i / 4].into(),
        ]
    });
    let nodes = &grid.nodes;
    let site_of = |peer: &str| -> &str {
        let i = nodes.iter().position(|n| n.peer == peer).unwrap();
        sites[i / 4]
    };
    wait_for_neighbours(nodes, 3, Duration::from_secs(30)).await;

    // 8 workers: exactly site a's cores.
    let mut client = nodes[0].client().await;
    let job = client
        .submit(nqueens(8, 12), wasm("nqueens"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
    let placed: Vec<&str> = status.ranks.values().map(|r| site_of(&r.node)).collect();
    assert_eq!(placed.len(), 8);
    assert!(
        placed.iter().all(|s| *s == "a"),
        "ranks on sites {placed:?}"
    );
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(out.contains("solutions=14200"), "{out:?}");

    // The home calls a job completed when every rank has reported its end,
    // which is just before the rank's node frees its core: wait until the
    // grid is idle, or a node still busy offers less than it has.
    wait_idle(nodes, Duration::from_secs(10)).await;

    // 12 workers: site a's 8, then 4 on site b (60 ms), none on c (150 ms).
    let job = client
        .submit(nqueens(12, 12), wasm("nqueens"), vec![])
        .await
        .unwrap();
    let status = wait_completed(&mut client, job, Duration::from_secs(60)).await;
    let mut count = std::collections::BTreeMap::new();
    for rank in status.ranks.values() {
        *count.entry(site_of(&rank.node)).or_insert(0) += 1;
    }
    assert_eq!(
        count,
        [("a", 8), ("b", 4)].into_iter().collect(),
        "ranks per site"
    );
    let out = stdout_of(&client.logs(job).await.unwrap());
    assert!(out.contains("solutions=14200"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sites_workers_land_on_the_submitters_site_first() {
    three_sites(Net::Loopback).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sites_workers_land_on_the_submitters_site_first_on_hosts() {
    three_sites(Net::Hosts).await;
}

/// A malleable nqueens job on 4 of 6 one-core nodes; the node of a non-zero
/// rank is killed (-9) mid-run: the rank is replaced on another node, the
/// master re-queues the task it held, and the count is still right.
async fn killed_worker_node(net: Net) {
    let mut grid = grid_on(net, 6, 1);
    let mut client = grid.nodes[0].client().await;
    let mut request = nqueens(4, 16);
    request.min_workers = 3;
    let job = client
        .submit(request, wasm("nqueens"), vec![])
        .await
        .unwrap();
    let running = wait_for(&mut client, job, Duration::from_secs(30), "4 ranks", |s| {
        s.phase == JobPhase::Running && s.ranks.len() == 4
    })
    .await;
    let home = grid.nodes[0].peer.clone();
    let (&victim_rank, victim) = running
        .ranks
        .iter()
        .find(|(rank, r)| **rank > 0 && r.node != home)
        .expect("a non-zero rank away from the home");
    let victim_node = grid
        .nodes
        .iter()
        .position(|n| n.peer == victim.node)
        .unwrap();
    let victim_peer = victim.node.clone();
    // Kill it while its worker is running.
    let mut c = grid.nodes[victim_node].client().await;
    let start = Instant::now();
    while !c.node_info().await.unwrap().running.contains_key(&job) {
        assert!(start.elapsed() < Duration::from_secs(20), "rank never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    grid.nodes[victim_node].kill();

    let status = wait_completed(&mut client, job, Duration::from_secs(120)).await;
    let replacement = &status.ranks[&victim_rank].node;
    assert_ne!(replacement, &victim_peer, "rank {victim_rank} not replaced");
    assert!(
        grid.nodes.iter().any(|n| &n.peer == replacement),
        "{replacement} is not a grid node"
    );
    let logs = client.logs(job).await.unwrap();
    let stderr = common::stderr_of(&logs);
    assert!(
        stderr.contains(&format!("rank {victim_rank} was replaced")),
        "the master was not told: {stderr:?}"
    );
    let out = stdout_of(&logs);
    assert!(
        out.contains("nqueens N=16 ranks=4 solutions=14772512"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_node_is_replaced_and_the_answer_is_right() {
    killed_worker_node(Net::Loopback).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_node_is_replaced_and_the_answer_is_right_on_hosts() {
    killed_worker_node(Net::Hosts).await;
}

/// The home of a running job is killed (-9) and restarted at once (issue
/// 16). The other node, which runs the job's other rank, holds a copy of
/// the job and takes it over; the rank of the restarted node is lost, so
/// the rigid job fails there, naming the restart, and its worker stops.
/// The restarted home asks the grid where its job went and answers with
/// the new home's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_home_hands_its_job_to_the_copy_that_took_it_over() {
    let mut grid = grid(2, 1);
    let job = {
        let mut home = grid.nodes[1].client().await;
        let request = JobRequest {
            min_workers: 2,
            max_workers: 2,
            lifetime_secs: 30,
            ..JobRequest::default()
        };
        let job = home.submit(request, wasm("idle"), vec![]).await.unwrap();
        wait_for(&mut home, job, Duration::from_secs(30), "2 workers", |s| {
            s.running_workers() == 2
        })
        .await;
        job
    };
    let mut member = grid.nodes[0].client().await;
    let start = Instant::now();
    while !member.node_info().await.unwrap().running.contains_key(&job) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no worker on node 0"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    grid.nodes[1].restart();
    let new_home = grid.nodes[0].peer.clone();
    let mut old = grid.nodes[1].client().await;
    let start = Instant::now();
    let status = loop {
        if let Ok(s) = old.status(job).await
            && s.home.as_deref() == Some(new_home.as_str())
            && s.phase.is_terminal()
        {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "the restarted home never answered with its copy's end of the job"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status.phase, JobPhase::Failed, "{status:?}");
    assert_eq!(
        status.moved_from.as_deref(),
        Some(grid.nodes[1].peer.as_str())
    );
    // The copy's own worker stopped with the job.
    let start = Instant::now();
    while member.node_info().await.unwrap().running.contains_key(&job) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the worker on node 0 still runs after the job failed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Jobs back to back: each asks for every core of the grid, which the
/// one before is just giving back. A node whose first offer was short of
/// cores raises it as they free up, so the job starts within seconds, not
/// after the offer's hold (30 s: the jobs live longer than that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_right_after_another_gets_the_cores_it_gave_back() {
    for nodes in [1, 4] {
        let grid = grid(nodes, 2);
        wait_for_neighbours(&grid.nodes, nodes.min(2) - 1, Duration::from_secs(30)).await;
        let mut client = grid.nodes[0].client().await;
        for n in [10, 11, 12] {
            let mut request = nqueens(2 * nodes as u32, n);
            request.lifetime_secs = 600;
            let job = client
                .submit(request, wasm("nqueens"), vec![])
                .await
                .unwrap();
            let start = Instant::now();
            let status = wait_for(&mut client, job, Duration::from_secs(20), "the end", |s| {
                s.phase.is_terminal()
            })
            .await;
            assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
            eprintln!("{nodes} nodes, N={n}: {:?}", start.elapsed());
        }
    }
}

/// A home of one core, alone on its site, and three one-core nodes on a
/// site 40 ms away: once the home has measured them, the first flood of a
/// job that needs them all goes 64 ms far at once, not 1 ms doubling one
/// flood at a time (seven floods to get there, each flooding the nearer
/// ball again). The job (five workers, one more than the grid has) keeps
/// looking, so its search can be read: each flood doubles the budget from
/// 64 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_needing_far_nodes_floods_as_far_as_they_are_at_once() {
    let net = Net::Loopback;
    let topology_dir = tempfile::tempdir().unwrap();
    let sites = ["a", "b"];
    let mut topology = String::from(
        "default_rtt_ms = 40\n\
         [[sites]]\nname = \"a\"\nrtt_within_ms = 1\n\
         [[sites]]\nname = \"b\"\nrtt_within_ms = 1\n\
         [hosts]\n",
    );
    let site_of = |i: usize| usize::from(i > 0);
    for i in 0..4 {
        let (s, h) = (site_of(i), i.saturating_sub(1));
        topology.push_str(&format!("\"{}\" = \"{}\"\n", host_ip(net, s, h), sites[s]));
    }
    let topology_file = topology_dir.path().join("sites.toml");
    std::fs::write(&topology_file, topology).unwrap();
    let grid = sites_grid(net, &[1, 3], 1, |i| {
        vec![
            "--topology".to_string(),
            topology_file.display().to_string(),
            "--site".into(),
            sites[site_of(i)].into(),
        ]
    });
    wait_nodes(
        &grid.nodes[..1],
        Duration::from_secs(60),
        "the home's scheduler knowing its 3 peers' distances",
        |info| info.peers_measured >= 3,
    )
    .await;
    let mut client = grid.nodes[0].client().await;
    let job = client
        .submit(nqueens(5, 10), wasm("nqueens"), vec![])
        .await
        .unwrap();
    let status = wait_for(&mut client, job, Duration::from_secs(30), "a flood", |s| {
        s.pending.as_ref().is_some_and(|p| p.floods >= 1)
    })
    .await;
    let pending = status.pending.unwrap();
    let doublings = pending.floods - 1;
    let expected = (64u64 << doublings.min(10)).min(2000);
    assert_eq!(
        pending.budget_ms,
        Some(expected),
        "after {} floods: {pending:?}",
        pending.floods
    );
    client.cancel(job).await.unwrap();
}
