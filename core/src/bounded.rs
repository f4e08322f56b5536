//! Bounded per-peer tables: the one rule every table keyed by something a
//! peer chooses follows when it is full.

use std::collections::BTreeMap;

/// Makes room in `map`, full at `capacity`, for an entry under `key`: the
/// entry `age` gives the smallest (the oldest) goes. Nothing goes when
/// `key` has an entry already or the map has room. Ties go to the first
/// key in order, so the choice is deterministic.
pub fn make_room<K: Ord + Clone, V, T: Ord>(
    map: &mut BTreeMap<K, V>,
    key: &K,
    capacity: usize,
    age: impl Fn(&V) -> T,
) {
    if map.contains_key(key) || map.len() < capacity {
        return;
    }
    let oldest = map
        .iter()
        .min_by_key(|(_, value)| age(value))
        .map(|(k, _)| k.clone());
    if let Some(oldest) = oldest {
        map.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_entry_makes_room_only_for_a_new_key_of_a_full_map() {
        let mut map = BTreeMap::from([(1, 30), (2, 10), (3, 10), (4, 20)]);
        make_room(&mut map, &2, 4, |v| *v);
        assert_eq!(map.len(), 4, "the key has an entry already");
        make_room(&mut map, &9, 5, |v| *v);
        assert_eq!(map.len(), 4, "room enough");
        make_room(&mut map, &9, 4, |v| *v);
        assert_eq!(
            map.keys().copied().collect::<Vec<_>>(),
            vec![1, 3, 4],
            "the first oldest"
        );
    }
}
