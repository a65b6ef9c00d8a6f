package routing

