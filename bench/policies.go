package bench

// fairnessPolicies returns the fairness package's policies for the matrix. The fairness
// package is not committed yet; its policies join here when it lands.
func fairnessPolicies() []Policy { return nil }
