"""Helpers the tests share: real servers, hubs, endpoints and engines to run against."""
