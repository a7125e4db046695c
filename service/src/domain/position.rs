//! Positions in the commit-ordered change logs.

use std::fmt;
use std::str::FromStr;

/// A position in a change log: the writing transaction's id and a sequence
/// number. Positions order changes by commit for readers that stay below the
/// database's frontier (see `resource_changes` in the migrations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// Writing transaction id.
    pub txid: i64,
    /// Sequence number.
    pub seq: i64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.txid, self.seq)
    }
}

/// A string that is not a position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a resource version")]
pub struct PositionParseError;

impl FromStr for Position {
    type Err = PositionParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (txid, seq) = s.split_once('.').ok_or(PositionParseError)?;
        let txid: i64 = txid.parse().map_err(|_| PositionParseError)?;
        let seq: i64 = seq.parse().map_err(|_| PositionParseError)?;
        if txid < 0 || seq < 0 {
            return Err(PositionParseError);
        }
        Ok(Position { txid, seq })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_and_order_by_transaction_first() {
        let a = Position { txid: 9, seq: 100 };
        let b = Position { txid: 10, seq: 1 };
        assert!(a < b);
        assert_eq!(a.to_string().parse::<Position>(), Ok(a));
        assert!("x.1".parse::<Position>().is_err());
        assert!("1".parse::<Position>().is_err());
        assert!("-1.2".parse::<Position>().is_err());
    }
}
