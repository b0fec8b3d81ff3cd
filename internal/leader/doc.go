// Package leader makes replicas take turns on a Kubernetes Lease
// (leases.coordination.k8s.io), on client-go's leaderelection, so that one
// of them at a time does work that must not run twice: the orphan
// Sweeper's sweeps, the Manager's servers.
//
// # Order
//
// Run calls lead each time this replica gains the Lease, and cancels
// lead's context when the lease is lost or Run's context ends. The Lease
// is renewed for as long as lead runs, including after its context has
// ended, and given back only once lead has returned: on shutdown, Run
// waits for lead, then releases the Lease (a holder-less record of 1
// second, as client-go's ReleaseOnCancel writes), so a standby takes over
// at its next try, well before LeaseDuration, and never while lead may
// still act. Losing the lease is the one case where the Lease is not in
// this replica's hands: lead's context ends RenewDeadline after the last
// renewal, and a standby may take over LeaseDuration after it last saw
// the Lease change, so lead must reach its safe point within
// LeaseDuration − RenewDeadline. Run then campaigns again.
//
// # Check
//
// Check proves, with the calls the election makes, that this replica can
// get the Lease, create it when it does not exist (without a holder, so
// no one leads by it), and update it (unchanged, which the API server
// authorises without writing). It does not prove that the rules stay in
// place. Run calls Check first: a Lease that cannot be used is an error
// returned from Run, naming the verb, the Lease and what to grant, never
// a replica left standing by forever. What fails later is logged to the
// logger in Run's context, where client-go's elector logs too, and Run
// goes on campaigning.
//
// # Concurrency
//
// Check and Run share nothing and are safe to call concurrently. Within
// one Run at most one lead runs at a time, on Run's goroutine; every
// goroutine Run starts has returned when Run returns. Across replicas on
// one Lease, at most one leads at a time within the margin above.
package leader
