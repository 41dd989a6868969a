//! Backend contract suite (filled in below).
