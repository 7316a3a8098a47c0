package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/collectives"
)

// writeHeader writes the lines above the table: the run's settings, the
// machine, the transport and why, NCCL's version and NVLS setting, and
// how the times are taken.
func writeHeader(w io.Writer, cfg *config, rep *Report) {
	gpus := fmt.Sprintf("nGpus %d", rep.Config.NGPUs)
	if rep.Config.SharedDevices {
		gpus = fmt.Sprintf("nRanks %d nGpus %d", rep.Config.NGPUs, rep.Config.Devices)
	}
	fprintf(w, "# nvls-bench %s: %s minBytes %d maxBytes %d step: %d(factor) warmup iters: %d iters: %d agg iters: %d validation: %d graph: %d timing: %s\n",
		cfg.coll.Name, gpus, cfg.minBytes, cfg.maxBytes, cfg.stepFactor, cfg.warmup, cfg.iters, cfg.aggIters, cfg.checkIters, cfg.graphLaunches, cfg.timing)
	if cfg.blocking {
		fprintf(w, "# Blocking: every collective is waited for before the next is issued (nvls: Comm.Sync; NCCL: a cuStreamQuery spin): the latency mode\n")
	}
	fprintf(w, "#\n")
	m := rep.Machine
	if m.Simulated {
		fprintf(w, "# %s\n", cli.SimNotice(m.SimulatedWhy))
	}
	fprintf(w, "# Driver: %s, version %d (CUDA %d.%d)\n", m.Driver, m.DriverVersion, m.DriverVersion/1000, m.DriverVersion%1000/10)
	fprintf(w, "# Using devices\n")
	for _, g := range m.GPUs {
		pid, host := os.Getpid(), m.Hostname
		if g.Pid != 0 {
			pid, host = g.Pid, g.Host
		}
		fprintf(w, "#  Rank %2d Pid %6d on %10s device %2d [%s] %s\n", g.Rank, pid, host, g.Ordinal, g.BusID, g.Name)
	}
	if one := singleCPURanks(m.GPUs); one != "" {
		fprintf(w, "# Warning: rank(s) %s may run on 1 CPU only (mpirun binds each process to a core at -np <= 2; pass it --bind-to none): launches, waits and the check share that core\n", one)
	}
	writeSharedHeader(w, rep)
	fprintf(w, "# Transport: %s (requested: %s): %s\n", rep.Transport.Name, cfg.transport, rep.Transport.Reason)
	if s := rep.NVLS; s != nil {
		fprintf(w, "# nvls: %s\n", describeSettings(*s))
	}
	writeRooflineHeader(w, rep)
	writeNCCLHeader(w, cfg, rep)
	fprintf(w, "# Time: %s\n", timeMethod(cfg))
	fprintf(w, "#\n")
}

// writeNCCLHeader says what the NCCL columns are, or why there are none.
func writeNCCLHeader(w io.Writer, cfg *config, rep *Report) {
	if rep.NCCLSkipped != "" {
		fprintf(w, "# NCCL: not run (-compare nccl): %s\n", rep.NCCLSkipped)
		return
	}
	if rep.NCCL == nil {
		return
	}
	fprintf(w, "# NCCL: version %s (%s), NCCL_NVLS_ENABLE=%s\n", rep.NCCL.VersionText, rep.NCCL.Library, rep.NCCL.NVLSEnable)
	if rep.NCCL.NVLSEnable != "0" && rep.Transport.Name == "unicast" {
		fprintf(w, "# WARNING: nvls runs unicast but NCCL_NVLS_ENABLE is not 0: NCCL may use NVLink SHARP (multicast); the columns do not compare like for like\n")
	}
	fprintf(w, "# NCCL columns: same sizes, same buffers, same streams, same run")
	if cfg.graphLaunches > 0 {
		fprintf(w, ", captured into CUDA graphs the same way")
	}
	fprintf(w, "; ratio = NCCL time / nvls time: > 1 means nvls is faster\n")
	if rep.Config.NGPUs == 1 {
		fprintf(w, "# NCCL with one rank runs no communication kernel (a local copy), on symmetric memory or not\n")
	}
	if s := rep.NCCLSym; s != nil {
		fprintf(w, "# NCCL symmetric columns: NCCL on buffers of its own (%s, %s per rank and direction) registered with %s, where NCCL picks its symmetric kernels; same sizes, streams and run; ratio = their time / nvls time\n",
			s.Alloc, cli.FormatSize(s.BufferBytes), s.Registration)
		if cfg.aggIters > 1 {
			fprintf(w, "# NCCL 2.27 runs its symmetric kernels for one collective per group: with -m %d it may not use them\n", cfg.aggIters)
		}
	} else if rep.NCCLSymSkipped != "" {
		fprintf(w, "# NCCL symmetric: not run: %s\n", rep.NCCLSymSkipped)
	}
}

// writeSharedHeader says that ranks share GPUs, and what that means.
func writeSharedHeader(w io.Writer, rep *Report) {
	c := rep.Config
	if !c.SharedDevices {
		return
	}
	fprintf(w, "# Shared GPUs (-ranks %d): %d ranks on %d GPU(s), rank r on GPU r mod %d: the ranks of one GPU share its SMs and memory bandwidth, and reach each other's memory locally, not over NVLink: times are NOT a node's\n",
		c.NGPUs, c.NGPUs, c.Devices, c.Devices)
}

// writeRooflineHeader gives the copy roofline the roof column is of.
func writeRooflineHeader(w io.Writer, rep *Report) {
	rl := rep.Roofline
	if rl == nil {
		return
	}
	var per []string
	for _, g := range rl.GPUs {
		where := fmt.Sprintf("device %d", g.Device)
		if g.Host != "" {
			where = g.Host + " " + where
		}
		per = append(per, fmt.Sprintf("%s (ranks %v) %.1f", where, g.Ranks, g.GBs))
	}
	fprintf(w, "# Copy roofline (%d copies of %s, %s): %s GB/s; all GPUs %.1f GB/s\n",
		rl.Copies, cli.FormatSize(rl.Bytes), rl.Method, strings.Join(per, ", "), rl.TotalGBs)
	fprintf(w, "# roof = the fewest bytes the collective must move (every input read once, every output written once) / time, as a percentage of all GPUs' copy roofline\n")
}

// timeMethod says how the table's times are taken (schedule, -a).
func timeMethod(cfg *config) string {
	whose := [...]string{avgRank0: "rank 0", avgMean: "the mean over the ranks", avgMin: "the fastest rank", avgMax: "the slowest rank"}[cfg.average]
	if cfg.blocking {
		tm := fmt.Sprintf("host time per collective, issue + wait (-z 1), average over -n iterations of %s", whose)
		if cfg.timing == "median" {
			tm = fmt.Sprintf("host time per collective, issue + wait (-z 1), median over iterations of %s's time", whose)
		}
		return tm
	}
	tm := fmt.Sprintf("average over -n iterations of %s (CUDA events per rank)", whose)
	if cfg.timing == "median" {
		tm = fmt.Sprintf("median over iterations of %s's time (CUDA events per rank and iteration)", whose)
		if cfg.average == avgMean {
			tm = "median over iterations of the mean of the ranks' times (CUDA events per rank and iteration)"
		}
		if cfg.segment > 1 {
			tm = fmt.Sprintf("median over segments of %d iterations of %s's average (CUDA events per rank and segment)", cfg.segment, whose)
			if cfg.average == avgMean {
				tm = fmt.Sprintf("median over segments of %d iterations of the mean of the ranks' averages (CUDA events per rank and segment)", cfg.segment)
			}
		}
	}
	switch {
	case cfg.graphLaunches == 1:
		tm += "; the iterations replayed from one CUDA graph per GPU"
	case cfg.graphLaunches > 1 && cfg.timing == "median":
		tm += fmt.Sprintf("; each iteration replayed %d times from one CUDA graph per GPU", cfg.graphLaunches)
	case cfg.graphLaunches > 1:
		tm += fmt.Sprintf("; the iterations replayed %d times from one CUDA graph per GPU", cfg.graphLaunches)
	}
	switch {
	case cfg.graphLaunches > 0 && cfg.coldGraph:
		tm += "; the first launch of each graph, which uploads it, timed (-cold-graph, as nccl-tests)"
	case cfg.graphLaunches > 0:
		tm += ", after one untimed replay that uploads it"
	}
	switch {
	case cfg.graphLaunches > 0 && cfg.launch == "parallel":
		tm += "; this process launches its GPUs' graphs from a thread per GPU at once (-launch parallel)"
	case cfg.graphLaunches > 0 && cfg.launch == "workers":
		tm += "; this process launches each GPU's graph on that GPU's team worker (team.Run: a thread per GPU, spinning between jobs; -launch workers)"
	}
	if cfg.aggIters > 1 {
		tm += fmt.Sprintf("; %d collectives per iteration, issued together (-m), each counted", cfg.aggIters)
	}
	return tm
}

// singleCPURanks lists the ranks whose process may run on one CPU only,
// "" if none.
func singleCPURanks(gpus []GPU) string {
	var rs []string
	for _, g := range gpus {
		if g.CPUs == 1 {
			rs = append(rs, fmt.Sprint(g.Rank))
		}
	}
	return strings.Join(rs, ", ")
}

// describeSettings is the header's account of what nvls's Comm ran with:
// its limits (0: never) and sizes.
func describeSettings(s collectives.Settings) string {
	upTo := func(n uint64) string {
		if n == 0 {
			return "off"
		}
		return "to " + cli.FormatSize(n)
	}
	from := func(n uint64) string {
		if n == 0 {
			return "off"
		}
		return "from " + cli.FormatSize(n)
	}
	ring := "off"
	if s.RingMin != 0 {
		ring = fmt.Sprintf("%s (FIFO %s a rank)", from(s.RingMin), cli.FormatSize(s.RingBytes))
	}
	ce := from(s.CopyEngineMin)
	if s.ReduceCopyEngineMin != 0 && s.ReduceCopyEngineMin != s.CopyEngineMin {
		ce += " (reduce " + from(s.ReduceCopyEngineMin) + ")"
	}
	return fmt.Sprintf("LL %s; two LL steps: reduce %s, broadcast %s; one-shot %s; copy engines %s; reduce pulled by the root %s; ring reduce %s; staging 2 x %s; grid %d-%d blocks; timeout %s; PDL %s",
		upTo(s.LLMax), upTo(s.LLTwoMax), upTo(s.LLTwoBcastMax), upTo(s.OneShotMax), ce, from(s.ReducePullMin), ring,
		cli.FormatSize(s.StageBytes), s.MinGrid, s.MaxGrid, s.Timeout, s.PDL)
}
