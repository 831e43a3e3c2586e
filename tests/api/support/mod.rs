//! Support for the HTTP suite, one concern a module: which services the run has ([`needs`]),
//! the server under test ([`server`]), the typed client that talks to it ([`client`]), the
//! records and Redis as a test reads them ([`db`]), the tenants and pools tests set up
//! ([`fixtures`]), a runner with its signed reports ([`runner`]), a runner's delivery URL on
//! loopback ([`loopback`]) a proxy to cut a dependency ([`proxy`]), a client of the audit stream ([`sse`]) and the routes
//! it calls, each written once ([`routes`]). Tests import what they
//! use from here: `use crate::support::{...}`.

pub(crate) mod client;
pub(crate) mod db;
pub(crate) mod fixtures;
pub(crate) mod loopback;
pub(crate) mod needs;
pub(crate) mod proxy;
pub(crate) mod routes;
pub(crate) mod runner;
pub(crate) mod server;
pub(crate) mod sse;

pub(crate) use client::*;
pub(crate) use db::*;
pub(crate) use fixtures::*;
pub(crate) use needs::*;
pub(crate) use proxy::*;
pub(crate) use server::*;
