package metric

import "sort"

// Family describes one metric family on /metrics: its Prometheus type, the one line of # HELP,
// and for a histogram its le buckets. Every family the process exposes is listed in families,
// bindery's own and the Go runtime and process families the library writes; a family missing
// here is exposed without help text, which the lint test of /metrics refuses.
type Family struct {
	Type    string    // counter, gauge, histogram or summary
	Help    string    // one line, no backslash
	Buckets []float64 // histograms: upper bounds in seconds

	// libType is the type the library declares for a family it types wrongly (a cumulative
	// counter written as a gauge); Write exposes Type instead.
	libType string
	// drop: the library writes the family, but its name breaks the conventions and it says
	// nothing about a CGO_ENABLED=0 service; Write leaves it out.
	drop bool
}

// Bucket sets, in seconds. A histogram_quantile is only as good as the buckets around it: each
// set spans what its latencies really are.
var (
	// httpBuckets: API answers, from a cached read to the request timeout.
	httpBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// callBuckets: one call to GitLab, the approval system or the permission service, up to the
	// longest outbound deadline; also one engine action or cron run (a call or a few statements).
	callBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// flowBuckets: waits a person or a pipeline decides, from seconds to a week.
	flowBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 259200, 604800}
	// lagBuckets: how late due work is claimed — near zero when workers are free, minutes when
	// a lane is saturated or an instance died holding a lease.
	lagBuckets = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900}
)

func counter(help string) Family { return Family{Type: "counter", Help: help} }
func gauge(help string) Family   { return Family{Type: "gauge", Help: help} }
func histogram(help string, buckets []float64) Family {
	return Family{Type: "histogram", Help: help, Buckets: buckets}
}

// families is the registry. Names follow the Prometheus conventions: base units in the name
// (_seconds, _bytes), counters end in _total, _info gauges are 1 with their facts as labels.
var families = map[string]Family{
	// HTTP (server).
	"bindery_http_requests_total":           counter("HTTP requests answered, by route and status code."),
	"bindery_http_request_duration_seconds": histogram("Time from a request's arrival at its handler to the answer, by route.", httpBuckets),
	"bindery_http_refused_total":            counter("HTTP requests refused by authentication before their handler, by route and error code."),
	"bindery_activity_total":                counter("Business activity on the whitelisted routes: requests received, and succeeded with a 2xx, by action and caller kind."),
	"bindery_ratelimited_total":             counter("Requests refused by the rate limit, by bucket."),
	"bindery_ratelimit_keys":                gauge("Rate-limit keys this instance tracks now."),
	"bindery_ratelimit_live_instances":      gauge("Live instances the shared rate limit is divided among."),
	"bindery_build_info":                    gauge("Always 1; the labels name the bindery version and the Go version it was built with."),

	// Configuration.
	"bindery_config_generation":          gauge("Generation of the configuration in force; each good reload adds one."),
	"bindery_config_reload_errors_total": counter("Configuration reloads refused; the last good configuration stays in force."),

	// Engine (tasks).
	"bindery_engine_workers":         gauge("Workers of each engine lane on this instance."),
	"bindery_engine_running":         gauge("Workers of each engine lane running an action now."),
	"bindery_engine_claims_total":    counter("Task claims by lane and outcome: won (claimed) or lost to another claimer (lost)."),
	"bindery_engine_lag_seconds":     histogram("Delay from a task being due to a worker claiming it, by lane.", lagBuckets),
	"bindery_engine_actions_total":   counter("Engine actions by task kind, step and outcome."),
	"bindery_engine_action_seconds":  histogram("Time one engine action took, by task kind and step.", callBuckets),
	"bindery_orphans_repaired_total": counter("In-flight work the repair sweep found without a task, by kind (should stay 0)."),
	"bindery_cron_runs_total":        counter("Cron job runs by job and outcome (skipped: the previous run had not finished)."),
	"bindery_cron_run_seconds":       histogram("Time one cron job run took, by job.", callBuckets),

	// Outbound calls.
	"bindery_outbound_requests_total":           counter("Calls to external systems by system, endpoint and status class."),
	"bindery_outbound_request_duration_seconds": histogram("Time one call to an external system took, by system and endpoint.", callBuckets),
	"bindery_outbound_breaker_opened_total":     counter("Times a circuit breaker to an external system opened, by system."),

	// Requests and batches (business outcomes, counted after commit).
	"bindery_requests_validated_total":       counter("Requests that reached VALIDATED, by how (callback, reconcile, operator) and project."),
	"bindery_requests_closed_total":          counter("Removals (revocations, expiries) that reached CLOSED once their deploy came, by how (callback, reconcile, operator) and project."),
	"bindery_request_stage_seconds":          histogram("Time requests spent in each finished stage: approval, batch, ci, merge, deploy.", flowBuckets),
	"bindery_deploy_callbacks_refused_total": counter("Deploy callbacks not believed, by reason."),
	"bindery_batch_wait_seconds":             histogram("Time a request waited in the queue until a batch round took it, by project.", flowBuckets),
	"bindery_batch_ci_seconds":               histogram("Time from the start of a batch's pipeline wait to its pass, by project.", flowBuckets),
	"bindery_batch_merge_seconds":            histogram("Time from the start of a batch's merge phase (approvals, rebases) to its merge, by project.", flowBuckets),
	"bindery_batch_bisections_total":         counter("Batches split after a failed pipeline (bisection), by project."),
	"bindery_batches_blocked_total":          counter("Batches that stopped to wait for a person, by project."),
	"bindery_batch_settle_failures_total":    counter("Batch settlements that did not go through and are retried, by project."),
	"bindery_batches_settled_total":          counter("Batches settled, by project and final status."),

	// Telling people (package notify).
	"bindery_notify_events_routed_total":      counter("Events routed to their receivers, by event type."),
	"bindery_notify_attempts_total":           counter("Delivery attempts by channel (webhook, email, chat, mrnote) and outcome (ok, or the failure's class: timeout, connect, dropped, status, gone, refused, tls, internal)."),
	"bindery_notify_attempt_seconds":          histogram("Time one delivery attempt took, by channel.", callBuckets),
	"bindery_notify_deliveries_total":         counter("Deliveries ended, by channel and outcome (delivered, failed, skipped)."),
	"bindery_notify_endpoints_disabled_total": counter("Receivers disabled (410 Gone, or failing longer than notify.disableAfter), by channel."),
	"bindery_notify_endpoints_failing":        gauge("Receivers whose deliveries fail now (not disabled), as the notify watch last counted them."),
	"bindery_notify_endpoints_disabled":       gauge("Receivers disabled now, as the notify watch last counted them."),
	"bindery_notify_deliveries_pending":       gauge("Deliveries waiting for an attempt, as the notify watch last counted them."),

	// What needs an operator, as the notify watch last read it from the database (every
	// instance reports the same numbers: alert on the max).
	"bindery_batches_blocked":               gauge("Batches BLOCKED now: waiting for a person in GitLab."),
	"bindery_batch_blocked_longest_seconds": gauge("How long the longest-BLOCKED batch has been BLOCKED (0: none)."),
	"bindery_requests_needing_attention":    gauge("Requests the ops stuck list shows: failed, pending, or their approval or deploy overdue."),
	"bindery_deploys_overdue":               gauge("Merged requests whose deploy callback is later than reconcile.deployOverdue."),
	"bindery_instances_stale":               gauge("Registered instances whose heartbeat stopped (older than three heartbeats, younger than a day)."),
	"bindery_config_refused_keys":           gauge("Configuration keys refused in the configuration in force (their last good values stay)."),

	// The Go runtime, as metrics.WriteProcessMetrics writes it.
	"go_info":                             gauge("Always 1; the label names the Go version."),
	"go_info_ext":                         gauge("Always 1; the labels name the Go compiler, GOARCH, GOOS and GOROOT."),
	"go_goroutines":                       gauge("Goroutines that exist now."),
	"go_threads":                          gauge("OS threads created by the Go runtime."),
	"go_gomaxprocs":                       gauge("GOMAXPROCS: OS threads that can run Go code at once."),
	"go_memlimit_bytes":                   gauge("The Go runtime's soft memory limit (GOMEMLIMIT)."),
	"go_gc_duration_seconds":              Family{Type: "summary", Help: "Stop-the-world pause of each garbage collection."},
	"go_gc_pauses_seconds":                histogram("Garbage collection pauses, from the runtime's own histogram.", nil),
	"go_sched_latencies_seconds":          histogram("Time goroutines waited runnable before they ran, from the runtime's own histogram.", nil),
	"go_gc_cpu_seconds_total":             counter("CPU time spent in garbage collection."),
	"go_gc_mark_assist_cpu_seconds_total": counter("CPU time goroutines spent assisting the garbage collector."),
	"go_mutex_wait_seconds_total":         counter("Time goroutines spent blocked on a sync.Mutex or sync.RWMutex."),
	"go_scavenge_cpu_seconds_total":       counter("CPU time spent returning unused memory to the OS."),
	"go_memstats_alloc_bytes":             gauge("Bytes of heap objects allocated and in use."),
	"go_memstats_alloc_bytes_total":       counter("Bytes allocated for heap objects since the start."),
	"go_memstats_buck_hash_sys_bytes":     gauge("Bytes in profiling bucket hash tables."),
	"go_memstats_frees_total":             counter("Heap objects freed since the start."),
	"go_memstats_gc_cpu_fraction":         gauge("Fraction of CPU time used by the garbage collector since the start."),
	"go_memstats_gc_sys_bytes":            gauge("Bytes of garbage collection metadata."),
	"go_memstats_heap_alloc_bytes":        gauge("Bytes of heap objects allocated and in use."),
	"go_memstats_heap_idle_bytes":         gauge("Bytes in idle heap spans."),
	"go_memstats_heap_inuse_bytes":        gauge("Bytes in in-use heap spans."),
	"go_memstats_heap_objects":            gauge("Heap objects allocated and in use."),
	"go_memstats_heap_released_bytes":     gauge("Bytes of physical memory returned to the OS."),
	"go_memstats_heap_sys_bytes":          gauge("Bytes of heap memory obtained from the OS."),
	"go_memstats_last_gc_time_seconds":    gauge("Unix time of the last garbage collection (0: none yet)."),
	"go_memstats_lookups_total":           counter("Pointer lookups by the runtime since the start."),
	"go_memstats_mallocs_total":           counter("Heap objects allocated since the start."),
	"go_memstats_mcache_inuse_bytes":      gauge("Bytes of allocated mcache structures."),
	"go_memstats_mcache_sys_bytes":        gauge("Bytes of memory obtained from the OS for mcache structures."),
	"go_memstats_mspan_inuse_bytes":       gauge("Bytes of allocated mspan structures."),
	"go_memstats_mspan_sys_bytes":         gauge("Bytes of memory obtained from the OS for mspan structures."),
	"go_memstats_next_gc_bytes":           gauge("Heap size at which the next garbage collection starts."),
	"go_memstats_other_sys_bytes":         gauge("Bytes of memory in miscellaneous runtime allocations."),
	"go_memstats_stack_inuse_bytes":       gauge("Bytes in stack spans."),
	"go_memstats_stack_sys_bytes":         gauge("Bytes of stack memory obtained from the OS."),
	"go_memstats_sys_bytes":               gauge("Bytes of memory obtained from the OS in total."),
	// Named like counters-of-nothing (_count on a counter, a gauge): left out.
	"go_cgo_calls_count": {Type: "counter", drop: true},
	"go_gc_forced_count": {Type: "counter", drop: true},
	"go_cpu_count":       {Type: "gauge", drop: true},

	// The process, from /proc (Linux).
	"process_cpu_seconds_total":                     counter("CPU time of the process, user and system."),
	"process_cpu_seconds_user_total":                counter("User CPU time of the process."),
	"process_cpu_seconds_system_total":              counter("System CPU time of the process."),
	"process_major_pagefaults_total":                counter("Page faults that read from disk."),
	"process_minor_pagefaults_total":                counter("Page faults served without disk."),
	"process_num_threads":                           gauge("OS threads of the process."),
	"process_start_time_seconds":                    gauge("Unix time the process started."),
	"process_resident_memory_bytes":                 gauge("Resident memory of the process."),
	"process_resident_memory_peak_bytes":            gauge("Highest resident memory of the process."),
	"process_resident_memory_anon_bytes":            gauge("Resident anonymous memory of the process."),
	"process_resident_memory_file_bytes":            gauge("Resident file-mapped memory of the process."),
	"process_resident_memory_shared_bytes":          gauge("Resident shared memory of the process."),
	"process_virtual_memory_bytes":                  gauge("Virtual memory of the process."),
	"process_virtual_memory_peak_bytes":             gauge("Highest virtual memory of the process."),
	"process_open_fds":                              gauge("Open file descriptors of the process."),
	"process_max_fds":                               gauge("Limit of open file descriptors of the process."),
	"process_io_read_bytes_total":                   libCounter("Bytes the process read, from any source."),
	"process_io_written_bytes_total":                libCounter("Bytes the process wrote, to any destination."),
	"process_io_read_syscalls_total":                libCounter("Read system calls of the process."),
	"process_io_write_syscalls_total":               libCounter("Write system calls of the process."),
	"process_io_storage_read_bytes_total":           libCounter("Bytes the process read from storage."),
	"process_io_storage_written_bytes_total":        libCounter("Bytes the process wrote to storage."),
	"process_pressure_cpu_waiting_seconds_total":    counter("Time the process's cgroup waited for CPU (pressure stall information)."),
	"process_pressure_cpu_stalled_seconds_total":    counter("Time all tasks of the process's cgroup stalled for CPU."),
	"process_pressure_io_waiting_seconds_total":     counter("Time the process's cgroup waited for I/O."),
	"process_pressure_io_stalled_seconds_total":     counter("Time all tasks of the process's cgroup stalled for I/O."),
	"process_pressure_memory_waiting_seconds_total": counter("Time the process's cgroup waited for memory."),
	"process_pressure_memory_stalled_seconds_total": counter("Time all tasks of the process's cgroup stalled for memory."),
	"process_cgroup_cpu_throttled_seconds_total":    counter("Time the process's cgroup was throttled by its CPU quota."),
}

// libCounter: a cumulative count the library declares as a gauge.
func libCounter(help string) Family {
	return Family{Type: "counter", Help: help, libType: "gauge"}
}

// Lookup is the registry entry of a metric family (the name before any '{').
func Lookup(name string) (Family, bool) {
	f, ok := families[name]
	return f, ok
}

// Names lists the registered families, sorted.
func Names() []string {
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
