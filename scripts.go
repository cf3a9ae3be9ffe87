package dlock

import (
	"embed"
	"io/fs"

	"github.com/go-dlock/dlock/internal/script"
)

// The Lua scripts, one per operation, and their helpers in lua/lib: see
// internal/script.
//
//go:embed lua
var scriptFiles embed.FS

var scriptFS, _ = fs.Sub(scriptFiles, "lua")

var (
	ownerRefresh = script.MustLoad(scriptFS, "owner_refresh.lua")
	forceUnlock  = script.MustLoad(scriptFS, "force_unlock.lua")
	queueAcquire = script.MustLoad(scriptFS, "queue_acquire.lua")
	queueRelease = script.MustLoad(scriptFS, "queue_release.lua")
	queueLeave   = script.MustLoad(scriptFS, "queue_leave.lua")
	queueStatus  = script.MustLoad(scriptFS, "queue_status.lua")
	rwLock       = script.MustLoad(scriptFS, "rw_lock.lua")
	rwUnlock     = script.MustLoad(scriptFS, "rw_unlock.lua")
	rwLeave      = script.MustLoad(scriptFS, "rw_leave.lua")
	rwRLock      = script.MustLoad(scriptFS, "rw_rlock.lua")
	rwRUnlock    = script.MustLoad(scriptFS, "rw_runlock.lua")
	rwRRefresh   = script.MustLoad(scriptFS, "rw_rrefresh.lua")
	rwRHeld      = script.MustLoad(scriptFS, "rw_rheld.lua")
	rwStatus     = script.MustLoad(scriptFS, "rw_status.lua")

	redlockAcquire = script.MustLoad(scriptFS, "redlock_acquire.lua")
	redlockRelease = script.MustLoad(scriptFS, "redlock_release.lua")

	setAdd     = script.MustLoad(scriptFS, "set_add.lua")
	setRemove  = script.MustLoad(scriptFS, "set_remove.lua")
	setAcquire = script.MustLoad(scriptFS, "set_acquire.lua")
	setRelease = script.MustLoad(scriptFS, "set_release.lua")
	setRefresh = script.MustLoad(scriptFS, "set_refresh.lua")
	setHeld    = script.MustLoad(scriptFS, "set_held.lua")
	setMembers = script.MustLoad(scriptFS, "set_members.lua")
	setStatus  = script.MustLoad(scriptFS, "set_status.lua")
)
