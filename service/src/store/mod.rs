//! Typed SQL access, one file per table family. All runtime SQL of the service
//! lives here (and in `migrations/`).

/// Declares a row struct (`sqlx::FromRow`) together with its column names
/// and a check of a row's column types against its fields, so a test can
/// compare the one declaration with the SQL type the row comes from.
macro_rules! row_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl $name {
            /// The column names, in the order of the fields.
            pub const COLUMNS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// The fields `row` cannot decode: a column it lacks or one of a
            /// type the field does not accept (described, one per field).
            pub fn mismatched_columns(row: &sqlx::postgres::PgRow) -> Vec<String> {
                use sqlx::{Column, Row, TypeInfo};
                let mut problems = Vec::new();
                $(
                    match row.try_column(stringify!($field)) {
                        Ok(column) => {
                            if !<$ty as sqlx::Type<sqlx::Postgres>>::compatible(column.type_info()) {
                                problems.push(format!(
                                    "{}: column of type {} for a field of type {}",
                                    stringify!($field),
                                    column.type_info().name(),
                                    stringify!($ty),
                                ));
                            }
                        }
                        Err(_) => problems.push(format!("{}: no such column", stringify!($field))),
                    }
                )*
                problems
            }
        }
    };
}

pub mod admin;
pub mod changes;
pub mod cluster;
pub mod deletion;
pub mod error;
pub mod events;
pub mod explain;
pub mod graph;
pub mod kinds;
pub mod leases;
mod measured;
pub mod migrations;
pub mod operations;
pub mod pipeline;
pub mod plans;
pub mod provider_configs;
pub mod reactors;
pub mod requests;
pub mod resources;
pub mod resync;
pub mod retry;
pub mod revisions;
pub mod statistics;
pub mod summary;
pub mod unserved;
pub mod work;

pub use error::StoreError;
pub use retry::RetryPolicy;

/// The result of a store operation; [`StoreError`] says what went wrong.
pub type StoreResult<T> = Result<T, StoreError>;

/// A kind version as the database stores it (`smallint`). Versions are
/// validated to fit before any query; this saturates defensively.
pub(crate) fn small_version(kind_version: i32) -> i16 {
    i16::try_from(kind_version).unwrap_or(i16::MAX)
}
