package dlock

import (
	"embed"
	"io/fs"

	"github.com/go-dlock/dlock/internal/script"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

var scriptFS, _ = fs.Sub(scriptFiles, "scripts")

var (
	mutexAcquire = script.MustLoad(scriptFS, "mutex_acquire.lua")
	mutexRelease = script.MustLoad(scriptFS, "mutex_release.lua")
	ownerRefresh = script.MustLoad(scriptFS, "owner_refresh.lua")
	fairAcquire  = script.MustLoad(scriptFS, "fair_acquire.lua")
	fairRelease  = script.MustLoad(scriptFS, "fair_release.lua")
	fairLeave    = script.MustLoad(scriptFS, "fair_leave.lua")
	fairStatus   = script.MustLoad(scriptFS, "fair_status.lua")
	mutexStatus  = script.MustLoad(scriptFS, "mutex_status.lua")
)
