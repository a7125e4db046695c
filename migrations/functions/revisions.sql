-- Spec history: a removed root's revisions go with it.

CREATE OR REPLACE FUNCTION drop_revisions_of_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    DELETE FROM spec_revisions s USING old_rows o
    WHERE s.resource_id = o.id AND o.owner_id IS NULL;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER resources_drop_revisions AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION drop_revisions_of_deleted();
