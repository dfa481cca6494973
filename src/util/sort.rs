//! Stable sorts through one copy of the standard library's sort.
//!
//! `slice::sort_by` is generic over the element and the comparison, so
//! every call site with its own type or closure compiled its own 3–4 KB
//! of merge sort: about 40 of them made 150 KB of the binary. These sort
//! the positions (one instantiation, a `dyn` comparison) and then move
//! the elements into place. The lists sorted here are short (names, a
//! directory, a few hundred candidates); `tests/layers.rs` holds the rule
//! that `src/` sorts only through them.

use std::cmp::Ordering;

/// Stable, by `cmp`, as `slice::sort_by`.
pub fn sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    if v.len() < 2 {
        return;
    }
    let mut order: Vec<usize> = (0..v.len()).collect();
    sort_positions(&mut order, &mut |a, b| cmp(&v[a], &v[b]));
    place(v, &mut order);
}

/// Stable, by the key `key` gives, as `slice::sort_by_key`.
pub fn sort_by_key<T, K: Ord>(v: &mut [T], mut key: impl FnMut(&T) -> K) {
    sort_by(v, |a, b| key(a).cmp(&key(b)));
}

/// Stable, in the elements' own order, as `slice::sort`.
pub fn sort<T: Ord>(v: &mut [T]) {
    sort_by(v, T::cmp);
}

/// The one instantiation of the standard sort.
fn sort_positions(order: &mut [usize], cmp: &mut dyn FnMut(usize, usize) -> Ordering) {
    order.sort_by(|&a, &b| cmp(a, b));
}

/// Moves `v[order[i]]` to position `i` for every `i`, in place: one cycle
/// of the permutation at a time, each position marked once it is filled.
fn place<T>(v: &mut [T], order: &mut [usize]) {
    const DONE: usize = usize::MAX;
    for start in 0..v.len() {
        let mut i = start;
        while order[i] != DONE {
            let from = order[i];
            order[i] = DONE;
            if from == start {
                break;
            }
            // `v[i]` holds the cycle's first element until the cycle closes.
            v.swap(i, from);
            i = from;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_the_standard_stable_sort() {
        let mut rng = fastrand::Rng::with_seed(7);
        for n in [0usize, 1, 2, 3, 5, 17, 100, 1000] {
            let v: Vec<(u8, usize)> = (0..n).map(|i| (rng.u8(..8), i)).collect();
            let mut want = v.clone();
            want.sort_by_key(|p| p.0);
            let mut got = v.clone();
            sort_by_key(&mut got, |p| p.0);
            assert_eq!(got, want, "n = {n}: equal keys keep their order");
            let mut desc = v.clone();
            sort_by(&mut desc, |a, b| b.cmp(a));
            assert!(desc.windows(2).all(|w| w[0] >= w[1]));
        }
        let mut words = vec!["pear".to_string(), "apple".into(), "fig".into()];
        sort(&mut words);
        assert_eq!(words, ["apple", "fig", "pear"]);
    }
}
