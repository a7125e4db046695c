-- kind_manifest's CHECK constraint calls kind_reactions_violation by its
-- identity, and the constraint needs the function when the table is
-- created, so 0002 defined the rules in a migration and 0014 extended them
-- through a copy (kind_reactions_core). From here the rules live in one
-- home, migrations/functions/kinds.sql (kind_reactions_rules, over
-- kind_reactions_shape), and kind_reactions_violation is a wrapper that
-- never changes again. The functions file is applied right after the
-- migrations, under the same lock; no manifest is written in between.
CREATE OR REPLACE FUNCTION kind_reactions_violation(p_reactions jsonb, p_finalizer_name text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
 SET search_path FROM CURRENT
AS $function$
BEGIN
    RETURN kind_reactions_rules(p_reactions, p_finalizer_name);
END
$function$;

DROP FUNCTION kind_reactions_core(jsonb, text);
