//! Tests of pfm report.
