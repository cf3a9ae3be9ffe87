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

var lua = script.MustLibrary(scriptFS)

var (
	ownerRefresh = loadBatched("owner_refresh.lua", "owner_renewals.lua", tokenTail, unpackRenewals)
	electRefresh = lua.MustLoad("owner_refresh.lua")
	ownerHeld    = lua.MustLoad("owner_held.lua")
	forceUnlock  = lua.MustLoad("force_unlock.lua")
	queueAcquire = lua.MustLoad("queue_acquire.lua")
	queueBeat    = loadBatched("queue_beat.lua", "queue_beats.lua", tokenTail, unpackBeats)
	queueRelease = lua.MustLoad("queue_release.lua")
	queueLeave   = lua.MustLoad("queue_leave.lua")
	queueStatus  = lua.MustLoad("queue_status.lua")
	rwLock       = lua.MustLoad("rw_lock.lua")
	rwUnlock     = lua.MustLoad("rw_unlock.lua")
	rwLeave      = lua.MustLoad("rw_leave.lua")
	rwRLock      = lua.MustLoad("rw_rlock.lua")
	rwRUnlock    = lua.MustLoad("rw_runlock.lua")
	rwRRefresh   = lua.MustLoad("rw_rrefresh.lua")
	rwRHeld      = lua.MustLoad("rw_rheld.lua")
	rwStatus     = lua.MustLoad("rw_status.lua")

	redlockAcquire = lua.MustLoad("redlock_acquire.lua")
	redlockRelease = lua.MustLoad("redlock_release.lua")
	redlockStatus  = lua.MustLoad("redlock_status.lua")

	setAdd     = lua.MustLoad("set_add.lua")
	setRemove  = lua.MustLoad("set_remove.lua")
	setAcquire = lua.MustLoad("set_acquire.lua")
	setRelease = lua.MustLoad("set_release.lua")
	setLeave   = lua.MustLoad("set_leave.lua")
	setRefresh = lua.MustLoad("set_refresh.lua")
	setHeld    = lua.MustLoad("set_held.lua")
	setMembers = lua.MustLoad("set_members.lua")
	setStatus  = lua.MustLoad("set_status.lua")

	semAcquire = lua.MustLoad("sem_acquire.lua")
	semRelease = lua.MustLoad("sem_release.lua")
	semLeave   = lua.MustLoad("sem_leave.lua")
	semRefresh = lua.MustLoad("sem_refresh.lua")
	semHeld    = lua.MustLoad("sem_held.lua")
	semStatus  = lua.MustLoad("sem_status.lua")

	electLeader   = lua.MustLoad("elect_leader.lua")
	electProclaim = lua.MustLoad("elect_proclaim.lua")
)
