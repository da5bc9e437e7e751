package app_test

import (
	"os"
	"testing"

	"bindery/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }
