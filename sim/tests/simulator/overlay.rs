//! The shape of the overlays: ours and the paper's baseline.

use super::*;

#[test]
fn our_overlay_is_connected_prefers_its_site_and_has_far_links() {
    let scenario = small_grid(0, false);
    let grid = scenario.grid(1).unwrap();
    let sim = Sim::new(&scenario, Mode::Ours, 1, Vec::new()).unwrap();
    let links = sim.overlay();
    // Connected, following links in the direction floods travel.
    let mut seen = BTreeSet::from([0u32]);
    let mut queue = VecDeque::from([0u32]);
    while let Some(node) = queue.pop_front() {
        for peer in &links[node as usize] {
            if seen.insert(*peer) {
                queue.push_back(*peer);
            }
        }
    }
    assert_eq!(
        seen.len(),
        grid.len(),
        "every node hears a flood from node 0"
    );
    // Every site has more machines than a node keeps near links, so every
    // near link stays within the site; far links cross sites.
    for (node, near) in sim.near_links().iter().enumerate() {
        assert_eq!(near.len(), 4, "node {node} has 4 near links");
        for peer in near {
            assert_eq!(
                grid.site_of[*peer as usize], grid.site_of[node],
                "near link {node}-{peer} leaves the site"
            );
        }
    }
    let same_site = links
        .iter()
        .enumerate()
        .flat_map(|(n, ls)| ls.iter().map(move |p| (n, *p as usize)))
        .filter(|(n, p)| grid.site_of[*n] == grid.site_of[*p])
        .count();
    let total: usize = links.iter().map(Vec::len).sum();
    assert!(same_site < total, "far links exist");
}

/// The paper's overlay on the 338 machines of the 671-worker run: by
/// default Bamboo with binary digits and every row gives each node about
/// ten neighbours (the paper: "in the order of 10"), and a flood of radius
/// 3 (the first for 671 workers) falls short of some; with hexadecimal
/// digits each has some 28 and radius 3 covers every node.
#[test]
fn the_baseline_overlays_degree_follows_its_digit_size() {
    let mut scenario = shipped("zorilla-671.toml");
    let stats = |scenario: &Scenario| {
        let links = Sim::new(scenario, Mode::Paper, 1, Vec::new())
            .unwrap()
            .overlay();
        let degree = links.iter().map(Vec::len).sum::<usize>() as f64 / links.len() as f64;
        let mut hops = vec![usize::MAX; links.len()];
        hops[0] = 0;
        let mut queue = VecDeque::from([0u32]);
        while let Some(node) = queue.pop_front() {
            for peer in &links[node as usize] {
                if hops[*peer as usize] == usize::MAX {
                    hops[*peer as usize] = hops[node as usize] + 1;
                    queue.push_back(*peer);
                }
            }
        }
        (degree, hops.iter().filter(|h| **h <= 3).count())
    };
    let (degree, within_3) = stats(&scenario);
    assert!((9.0..=12.0).contains(&degree), "{degree}");
    assert!(within_3 < 338 * 9 / 10, "{within_3}");
    scenario.overlay.baseline_digit_bits = 4;
    scenario.overlay.baseline_rows = Some(3);
    let (degree, within_3) = stats(&scenario);
    assert!((24.0..=32.0).contains(&degree), "{degree}");
    assert_eq!(within_3, 338);
}
