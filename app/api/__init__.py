"""HTTP plumbing shared by the routers: error mapping, body limits, dependencies."""
