package postgres

import (
	"context"

	"github.com/fenceq/fenceq/db"
)

// SCAFFOLD (branch sched-base): the sched-store branch replaces every
// method here with the engine's real schedules.

var errSchedulesTODO = db.Errorf(db.CodeUnavailable, "schedules are not built yet")

func (s *Store) PutSchedule(ctx context.Context, req db.PutScheduleRequest) (db.ScheduleResult, error) {
	return db.ScheduleResult{}, errSchedulesTODO
}
func (s *Store) GetSchedule(ctx context.Context, name string) (db.Schedule, error) {
	return db.Schedule{}, errSchedulesTODO
}
func (s *Store) ListSchedules(ctx context.Context, req db.ListSchedulesRequest) (db.SchedulePage, error) {
	return db.SchedulePage{}, errSchedulesTODO
}
func (s *Store) DeleteSchedule(ctx context.Context, req db.ScheduleRequest) (db.Schedule, error) {
	return db.Schedule{}, errSchedulesTODO
}
func (s *Store) SetSchedulePaused(ctx context.Context, req db.SchedulePauseRequest) (db.Schedule, error) {
	return db.Schedule{}, errSchedulesTODO
}
func (s *Store) TriggerSchedule(ctx context.Context, req db.ScheduleRequest) (db.Job, error) {
	return db.Job{}, errSchedulesTODO
}
func (s *Store) FireSchedules(ctx context.Context, limit int) (db.FireResult, error) {
	return db.FireResult{}, errSchedulesTODO
}
