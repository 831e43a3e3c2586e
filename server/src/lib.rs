//! Control plane: the service layer, its storage adapters and the HTTP surface.
//!
//! The HTTP API (`http`) and the admin CLI (`cpctl`) are thin adapters over `service`.

pub mod config;
pub mod domain;
pub mod http;
pub mod policy;
pub mod service;
pub mod startup;
pub mod storage;
pub mod telemetry;
