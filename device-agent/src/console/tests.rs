//! The console's tests.
