//! Distances to a flood's home that do not depend on the path the flood
//! took (issue 17): what a simulated node knows of them when its flood
//! router decides.
//!
//! By default a node knows only its own measured RTT to the home, if it
//! has one (the path's sum decides the rest), as the real node does.
//! [`Sim::exact_distances`] is a diagnostic: every node knows its own and
//! its neighbours' true RTTs to the home, the best any coordinate system
//! could estimate. On the generated topologies it did not improve
//! locality and cost messages (BENCHMARKS.md, "Generated topologies"),
//! which is how the cause of the workers placed out of order was found to
//! lie elsewhere.

use std::time::Duration;

use zorilla_core::advert::Advert;
use zorilla_core::flood::HomeDistance;

use super::Sim;

/// A node's distances to one flood's home.
pub(super) struct Distances {
    own: Option<Duration>,
    /// The true RTT from the home's site to each site, and each machine's
    /// site (the diagnostic only).
    exact: Option<(Vec<u64>, Vec<usize>)>,
}

impl HomeDistance<u32> for Distances {
    fn own(&self) -> Option<Duration> {
        self.own
    }

    fn peer(&self, peer: &u32) -> Option<Duration> {
        let (row, site_of) = self.exact.as_ref()?;
        let site = site_of.get(*peer as usize)?;
        row.get(*site).map(|us| Duration::from_micros(*us))
    }
}

impl Sim {
    /// Makes every node know its own and its neighbours' true RTTs to a
    /// flood's home (a diagnostic: see the [module documentation](self)).
    pub fn exact_distances(&mut self) {
        self.exact_distances = true;
    }

    /// What `node` knows of its and its neighbours' distances to the home
    /// of `advert`.
    pub(super) fn home_distances(&self, node: u32, advert: &Advert<u32>) -> Distances {
        if self.exact_distances {
            let home_site = self.grid.site_of[advert.home as usize];
            return Distances {
                own: Some(Duration::from_micros(self.grid.rtt_us(node, advert.home))),
                exact: Some((
                    self.grid.rtt_us[home_site].clone(),
                    self.grid.site_of.clone(),
                )),
            };
        }
        Distances {
            own: self.nodes[node as usize].overlay.rtt(&advert.home),
            exact: None,
        }
    }
}
