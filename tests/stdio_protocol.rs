//! Protocol-level behaviour over stdio: both eras, every protocol error row of the
//! catalog that stdio can produce, and bad input that must not stop the session.
