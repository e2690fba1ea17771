//! The members of each consumer group in this process, and how they share a
//! topic's queues (RocketMQ's `RebalanceImpl` with
//! `AllocateMessageQueueAveragely`, in one process): a member joins, says
//! which topics it follows, and gets a contiguous share of each topic's
//! queues among the members that follow it. Every change of membership bumps
//! the group's generation; a member that sees another generation than the one
//! its queues came from takes its share again before it hands out or commits
//! anything (both under the group's lock), so a queue has one owner at a time
//! and a committed offset moves only by its owner.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;
use std::task::Waker;

use parking_lot::{Mutex, MutexGuard};

/// Every consumer group with a member in this process.
#[derive(Debug, Default)]
pub(crate) struct ConsumerGroups {
    groups: Mutex<HashMap<String, Arc<Group>>>,
}

impl ConsumerGroups {
    /// Adds a member to `name`'s group (made if new); returns the group and
    /// the member's id.
    pub(crate) fn join(&self, name: &str) -> (Arc<Group>, u64) {
        // Under the map's lock: a group its last member is leaving is either
        // still in the map and joined, or gone and made anew, never joined
        // after it left the map.
        let (group, (id, wakers)) = {
            let mut groups = self.groups.lock();
            let group = Arc::clone(groups.entry(name.to_string()).or_default());
            let joined = group.change_quietly(|members| {
                let id = members.next_id;
                members.next_id += 1;
                members.topics.insert(id, BTreeSet::new());
                id
            });
            (group, joined)
        };
        wakers.into_values().for_each(Waker::wake);
        (group, id)
    }

    /// Every group's members take their shares again (and every member
    /// waiting is woken): a topic was made, deleted, or made again under its
    /// name (its queue count may differ), or the store shut down.
    pub(crate) fn touch_all(&self) {
        let groups: Vec<Arc<Group>> = self.groups.lock().values().cloned().collect();
        for group in groups {
            group.change(|_| ());
        }
    }

    /// Runs `change` (a write of `name`'s committed offsets from outside its
    /// members: a reset, a removal) under the group's lock if it has members
    /// here, then makes them take their shares again: none commits over the
    /// change, and each starts from it (a queue kept whose committed offset
    /// moved starts again from it).
    pub(crate) fn while_changing<R>(&self, name: &str, change: impl FnOnce() -> R) -> R {
        self.under_lock_of(name, |members| {
            if let Some(members) = members {
                members.resets += 1;
            }
            (change(), true)
        })
    }

    /// Runs `commit` (a commit of `name`'s offsets from outside its members:
    /// a broker's for a remote consumer, an operator's) under the group's
    /// lock if it has members here, so none commits over it. When it is
    /// taken, the members take their shares again: a queue whose committed
    /// offset is no longer the one its member knew starts again from it, the
    /// others keep their positions (no reset). One refused changes nothing.
    pub(crate) fn while_committing<R, E>(&self, name: &str, commit: impl FnOnce() -> Result<R, E>) -> Result<R, E> {
        self.under_lock_of(name, |_| {
            let result = commit();
            let taken = result.is_ok();
            (result, taken)
        })
    }

    /// Runs `f` under the lock of `name`'s group (given its members; `None`
    /// if it has none here), the group looked up and locked under the map's
    /// lock so no member joins or leaves between the two; when `f` says the
    /// group changed, bumps its generation and wakes its waiting members
    /// after the lock.
    fn under_lock_of<R>(&self, name: &str, f: impl FnOnce(Option<&mut Members>) -> (R, bool)) -> R {
        let groups = self.groups.lock();
        let Some(group) = groups.get(name).cloned() else {
            drop(groups);
            return f(None).0;
        };
        let mut members = group.members.lock();
        drop(groups);
        let (result, changed) = f(Some(&mut members));
        if changed {
            members.generation += 1;
            let wakers = std::mem::take(&mut members.wakers);
            drop(members);
            wakers.into_values().for_each(Waker::wake);
        }
        result
    }

    /// Runs `change` (a write of every group's committed offsets in a topic:
    /// a clean) under the lock of every group with members here, as
    /// [`while_changing`](Self::while_changing) does for one: none commits
    /// over the change, each member starts again from it, and no group joins
    /// or leaves meanwhile (the map's lock is held throughout; groups' locks
    /// are taken in their names' order).
    pub(crate) fn while_changing_all<R>(&self, change: impl FnOnce() -> R) -> R {
        let groups = self.groups.lock();
        let mut named: Vec<(&String, &Arc<Group>)> = groups.iter().collect();
        named.sort_by(|a, b| a.0.cmp(b.0));
        let mut locked: Vec<MutexGuard<'_, Members>> = named.iter().map(|(_, group)| group.members.lock()).collect();
        let result = change();
        let mut wakers = Vec::new();
        for members in &mut locked {
            members.resets += 1;
            members.generation += 1;
            wakers.extend(std::mem::take(&mut members.wakers).into_values());
        }
        drop(locked);
        drop(groups);
        wakers.into_iter().for_each(Waker::wake);
        result
    }

    /// Takes member `id` out of `name`'s group (the group goes with its last
    /// member).
    pub(crate) fn leave(&self, name: &str, group: &Group, id: u64) {
        let wakers = {
            let mut groups = self.groups.lock();
            let (empty, wakers) = group.change_quietly(|members| {
                members.topics.remove(&id);
                members.wakers.remove(&id);
                members.topics.is_empty()
            });
            if empty {
                groups.remove(name);
            }
            wakers
        };
        wakers.into_values().for_each(Waker::wake);
    }
}

/// One group's members.
#[derive(Debug, Default)]
pub(crate) struct Group {
    members: Mutex<Members>,
}

/// Who is in a group and what each follows.
#[derive(Debug, Default)]
pub(crate) struct Members {
    next_id: u64,
    /// Bumped by every change of membership or of a member's topics.
    generation: u64,
    /// Bumped by every write of the group's offsets from outside its members
    /// (a reset, a removal): each member starts every queue again from its
    /// committed offset, even one equal to what it last knew.
    resets: u64,
    /// Each member's topics, by id (ids in joining order).
    topics: BTreeMap<u64, BTreeSet<String>>,
    /// Members waiting for a change (a consumer waiting for messages is woken
    /// by one too: it may have queues to take).
    wakers: HashMap<u64, Waker>,
}

impl Members {
    /// The generation the shares below belong to.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// How many times the group's offsets were written from outside.
    pub(crate) fn resets(&self) -> u64 {
        self.resets
    }

    /// Member `id`'s share of `topic`'s `queues`: a contiguous range among
    /// the members that follow the topic, in joining order (RocketMQ's
    /// average allocation: the first `queues % members` take one more).
    pub(crate) fn share(&self, id: u64, topic: &str, queues: u32) -> Range<u32> {
        let following: Vec<u64> =
            self.topics.iter().filter(|(_, topics)| topics.contains(topic)).map(|(&member, _)| member).collect();
        match following.iter().position(|&member| member == id) {
            Some(index) => average_share(index, following.len(), queues),
            None => 0..0,
        }
    }
}

impl Group {
    /// The members, locked: shares are taken, messages handed out and
    /// offsets committed under it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Members> {
        self.members.lock()
    }

    /// Member `id` follows `topic` (or, with `follows` false, no longer does).
    pub(crate) fn follow(&self, id: u64, topic: &str, follows: bool) {
        self.change(|members| {
            if let Some(topics) = members.topics.get_mut(&id) {
                if follows {
                    topics.insert(topic.to_string());
                } else {
                    topics.remove(topic);
                }
            }
        });
    }

    /// Wakes member `id` (its `waker`) at the next change past `generation`;
    /// true if there was one already.
    pub(crate) fn changed_since(&self, id: u64, generation: u64, waker: &Waker) -> bool {
        let mut members = self.members.lock();
        if members.generation != generation {
            return true;
        }
        match members.wakers.get_mut(&id) {
            Some(known) if known.will_wake(waker) => {}
            Some(known) => known.clone_from(waker),
            None => {
                members.wakers.insert(id, waker.clone());
            }
        }
        false
    }

    /// Member `id` no longer waits for a change.
    pub(crate) fn forget_waker(&self, id: u64) {
        self.members.lock().wakers.remove(&id);
    }

    /// Changes the members with `change`, bumps the generation, and wakes
    /// every member waiting, once the lock is let go (a waker may run
    /// anything, a consumer's poll included).
    fn change<R>(&self, change: impl FnOnce(&mut Members) -> R) -> R {
        let (result, wakers) = self.change_quietly(change);
        wakers.into_values().for_each(Waker::wake);
        result
    }

    /// [`change`](Self::change), returning the wakers to wake instead: for a
    /// caller that holds another lock.
    fn change_quietly<R>(&self, change: impl FnOnce(&mut Members) -> R) -> (R, HashMap<u64, Waker>) {
        let mut members = self.members.lock();
        let result = change(&mut members);
        members.generation += 1;
        (result, std::mem::take(&mut members.wakers))
    }
}

/// The `index`-th of `members` members' share of `queues` queues
/// (`AllocateMessageQueueAveragely`).
fn average_share(index: usize, members: usize, queues: u32) -> Range<u32> {
    let queues = queues as usize;
    let rem = queues % members;
    let size = if queues <= members {
        1
    } else if index < rem {
        queues / members + 1
    } else {
        queues / members
    };
    let start = if index < rem { index * size } else { index * size + rem };
    let len = size.min(queues.saturating_sub(start));
    let at = |i: usize| u32::try_from(i).expect("below the queue count");
    at(start.min(queues))..at(start.min(queues) + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_queue_goes_to_exactly_one_member_and_shares_differ_by_at_most_one() {
        for members in 1..=9 {
            for queues in 0..=20u32 {
                let mut owner = vec![None; queues as usize];
                let mut sizes = Vec::new();
                for index in 0..members {
                    let share = average_share(index, members, queues);
                    sizes.push(share.len());
                    for q in share {
                        assert_eq!(owner[q as usize].replace(index), None, "{members} members, {queues} queues");
                    }
                }
                assert!(owner.iter().all(Option::is_some), "{members} members, {queues} queues: {owner:?}");
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(max - min <= 1, "{members} members, {queues} queues: {sizes:?}");
            }
        }
        assert_eq!(average_share(0, 3, 8), 0..3, "RocketMQ's: the first take one more");
        assert_eq!(average_share(2, 3, 8), 6..8);
    }

    #[test]
    fn members_share_only_the_topics_they_follow_and_changes_bump_the_generation() {
        let groups = ConsumerGroups::default();
        let (group, a) = groups.join("g");
        let (_, b) = groups.join("g");
        group.follow(a, "t", true);
        group.follow(b, "t", true);
        group.follow(b, "u", true);
        let generation = group.lock().generation();
        {
            let members = group.lock();
            assert_eq!((members.share(a, "t", 4), members.share(b, "t", 4)), (0..2, 2..4));
            assert_eq!((members.share(a, "u", 4), members.share(b, "u", 4)), (0..0, 0..4));
        }
        groups.leave("g", &group, b);
        assert!(group.lock().generation() > generation);
        assert_eq!(group.lock().share(a, "t", 4), 0..4, "the queues of a member that left move");
        groups.leave("g", &group, a);
        assert!(groups.groups.lock().is_empty(), "the group goes with its last member");
    }
}
