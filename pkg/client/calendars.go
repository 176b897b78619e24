package client

import (
	"context"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Business calendars (CalendarService). Reads, replacing updates without
// an expected version and replacing imports are retried on Unavailable;
// creates and deletes are not (a repeat of one that committed would answer
// AlreadyExists or NotFound), nor is an update that checks a version.

// Calendar returns one of the tenant's calendars.
func (c *Client) Calendar(ctx context.Context, name string) (*sundialv1.Calendar, error) {
	resp, err := call(ctx, c, true, func(ctx context.Context) (*sundialv1.GetCalendarResponse, error) {
		return c.cals.GetCalendar(ctx, &sundialv1.GetCalendarRequest{Name: name})
	})
	return resp.GetCalendar(), err
}

// Calendars returns one page of the tenant's calendars by name, and the
// next page's token ("" at the end).
func (c *Client) Calendars(ctx context.Context, pageSize int32, pageToken string) ([]*sundialv1.Calendar, string, error) {
	resp, err := call(ctx, c, true, func(ctx context.Context) (*sundialv1.ListCalendarsResponse, error) {
		return c.cals.ListCalendars(ctx, &sundialv1.ListCalendarsRequest{PageSize: pageSize, PageToken: pageToken})
	})
	return resp.GetCalendars(), resp.GetNextPageToken(), err
}

// CreateCalendar creates a calendar.
func (c *Client) CreateCalendar(ctx context.Context, cal *sundialv1.Calendar) (*sundialv1.Calendar, error) {
	resp, err := call(ctx, c, false, func(ctx context.Context) (*sundialv1.CreateCalendarResponse, error) {
		return c.cals.CreateCalendar(ctx, &sundialv1.CreateCalendarRequest{Calendar: cal})
	})
	return resp.GetCalendar(), err
}

// UpdateCalendar replaces a calendar's description, holidays and weekend;
// expectedVersion 0 replaces whatever version is stored.
func (c *Client) UpdateCalendar(ctx context.Context, cal *sundialv1.Calendar, expectedVersion int64) (*sundialv1.Calendar, error) {
	resp, err := call(ctx, c, expectedVersion == 0, func(ctx context.Context) (*sundialv1.UpdateCalendarResponse, error) {
		return c.cals.UpdateCalendar(ctx, &sundialv1.UpdateCalendarRequest{Calendar: cal, ExpectedVersion: expectedVersion})
	})
	return resp.GetCalendar(), err
}

// DeleteCalendar deletes a calendar no job uses.
func (c *Client) DeleteCalendar(ctx context.Context, name string) error {
	_, err := call(ctx, c, false, func(ctx context.Context) (*sundialv1.DeleteCalendarResponse, error) {
		return c.cals.DeleteCalendar(ctx, &sundialv1.DeleteCalendarRequest{Name: name})
	})
	return err
}

// ImportCalendar creates a calendar, or with req.Replace replaces one's
// holidays, from an iCalendar file.
func (c *Client) ImportCalendar(ctx context.Context, req *sundialv1.ImportCalendarRequest) (*sundialv1.ImportCalendarResponse, error) {
	return call(ctx, c, req.GetReplace(), func(ctx context.Context) (*sundialv1.ImportCalendarResponse, error) {
		return c.cals.ImportCalendar(ctx, req)
	})
}

// CalendarService is the generated CalendarService client.
func (c *Client) CalendarService() sundialv1.CalendarServiceClient { return c.cals }
