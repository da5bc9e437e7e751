package worker

import (
	"bytes"
	"runtime"
	"strconv"
)

// goid returns the current goroutine's id, only to prove in a test which goroutine ran a task.
func goid() int64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	buf = bytes.TrimPrefix(buf, []byte("goroutine "))
	n, _ := strconv.ParseInt(string(buf[:bytes.IndexByte(buf, ' ')]), 10, 64)
	return n
}
