//! Which ways in the bot answers: `channels` limits mentions, slash commands and DMs alike,
//! and DMs are off unless `dms = true`. A thread the bot already owns stays open (its parent
//! was listed when it was opened). One pure rule for every platform, so Discord and Slack
//! cannot drift apart.

/// Where a message or command came from, as far as intake cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place<T> {
    /// A direct message with the bot (even one whose workstream already exists).
    Dm,
    /// A thread whose workstream the bot already owns.
    OurThread,
    /// A channel (or a thread the bot does not own, with the channel it hangs off).
    Channel {
        /// The channel's id.
        id: T,
        /// The parent channel, for a thread.
        parent: Option<T>,
    },
}

/// Why the bot does not answer here; the text is for the person (privately).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Closed {
    /// A DM while `dms = false`.
    #[error("I don't answer direct messages here; ask me in one of the channels I work in.")]
    DmsOff,
    /// A channel outside `channels`.
    #[error("I don't work in this channel; ask me in one of the channels I work in.")]
    Unlisted,
}

/// Whether the bot answers at `place`, with `listed` channels (empty: every channel) and
/// DMs on or off.
pub fn admit<L: PartialEq<T>, T>(listed: &[L], dms: bool, place: Place<T>) -> Result<(), Closed> {
    match place {
        Place::Dm if dms => Ok(()),
        Place::Dm => Err(Closed::DmsOff),
        Place::OurThread => Ok(()),
        Place::Channel { id, parent } => {
            let has = |c: &T| listed.iter().any(|l| l == c);
            let open = listed.is_empty() || has(&id) || parent.as_ref().is_some_and(has);
            if open { Ok(()) } else { Err(Closed::Unlisted) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn channels_limit_every_way_in_and_dms_are_off_by_default() {
        let listed = [300_u64];
        let ch = |id: u64, parent: Option<u64>| Place::Channel { id, parent };
        assert_eq!(admit(&listed, false, ch(300, None)), Ok(()));
        assert_eq!(admit(&listed, false, ch(301, None)), Err(Closed::Unlisted));
        assert_eq!(admit(&listed, false, ch(999, Some(300))), Ok(()));
        assert_eq!(
            admit(&listed, false, ch(999, Some(301))),
            Err(Closed::Unlisted)
        );
        assert_eq!(admit(&listed, false, Place::<u64>::OurThread), Ok(()));
        assert_eq!(admit(&listed, false, Place::<u64>::Dm), Err(Closed::DmsOff));
        assert_eq!(admit(&listed, true, Place::<u64>::Dm), Ok(()));
        // No list: every channel, but still no DMs unless asked for.
        assert_eq!(admit::<u64, u64>(&[], false, ch(301, None)), Ok(()));
        assert_eq!(
            admit::<u64, u64>(&[], false, Place::Dm),
            Err(Closed::DmsOff)
        );
    }
}
