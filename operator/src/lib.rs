//! The memcached operator bundled with opconform.
