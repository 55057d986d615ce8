{-# LANGUAGE ImplicitPrelude, DataKinds, KindSignatures, ScopedTypeVariables, TypeApplications,
             TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies, NoStarIsType,
             RankNTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Test driver for "K2C.Engine" and "K2C.Conv" (not synthesized): runs one case
in the Clash simulation and writes its cycle trace for reference.py to check.

A case file @<prefix>.in@ has a first line @count pattern@: the number of
output beats expected (the trace ends with the cycle of the last one) and
downstream's ready in cycles 0, 1, .. as @0@/@1@ characters (True after the
pattern ends; @-@ for an empty pattern), then one line per input beat: @gap raw_0 raw_1 ...@ — @gap@ idle
cycles are inserted before the beat is offered (counted from the cycle the
previous beat moved), and the beat is then held until it moves (like
"K2C.Sim"). The trace @<prefix>.out@ has one line per event, cycles counted
from the first cycle after reset:

* @A t@      an input beat moved in cycle @t@;
* @O t raws@ an output beat moved in cycle @t@ (the raw integers of its values);
* conv only, the window stream between "K2C.Window" and the engine:
  @M t@ a window was valid, @a t@ a window moved.
-}
module Driver
  ( runEngineCase
  , runConvCase
  ) where

import Clash.Prelude
  ( Clock, HiddenClockResetEnable, KnownNat, SFixed, SNat (..), Signal, System, Vec
  , clockGen, enableGen, indicesI, natToNum, resetGenN, sf, toList, unSF
  , withClockResetEnable )
import Clash.Signal.Internal (Signal ((:-)))
import Data.Maybe (isJust)
import Data.Proxy (Proxy (..))
import GHC.TypeLits (type (*), type (<=))

import K2C.Activation (Finish, TableRegs)
import K2C.Conv (conv2d, direct, flattenWindow)
import K2C.Engine (EngineShape, afterAccept, engine, engineFrom)
import K2C.Filter (Accumulates)
import K2C.Memory (WeightRom)
import K2C.Stream (Stream)
import K2C.Window (windowHeld)

-- | Cycles simulated at most per case (a case needs far fewer).
budget :: Int
budget = 200000

-- | Run an engine case: windows of @k@ values in @SFixed ai af@.
runEngineCase
  :: forall k f p b l ch g ai af wi wf bi bf ci cf oi fo t
   . ( EngineShape k f p b ch g, KnownNat l, TableRegs t, Accumulates ai af wi wf bi bf ci cf
     , KnownNat oi, KnownNat fo )
  => FilePath
  -> Proxy (Vec k (SFixed ai af))
  -> SNat f
  -> SNat p -> SNat b -> SNat l
  -> WeightRom (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) (SFixed oi fo)
  -> IO ()
runEngineCase prefix _ _ p b l rom finish = do
  (count, pattern, items) <- readCase @k @ai @af (prefix ++ ".in")
  let block :: Stream System (Vec k (SFixed ai af)) (Vec f (SFixed oi fo))
      block = withSystem (engine p b l rom finish)
      (output, readyIn) = block (input, readyOut)
      input    = drive items readyIn
      readyOut = readies pattern
      events   = zipWith4' (\t i r o -> inEvent t i r ++ outEvent t o)
                   [-1 ..] (signalList input) (signalList readyIn)
                   (zip (signalList output) (signalList readyOut))
  writeFile (prefix ++ ".out") (unlines (concat (upTo count (drop 1 events))))

-- | Run a conv case: pixels of @c@ values; the conv is also built from its
-- parts (the generator and its register, the engine loading from that register)
-- to record the window stream, and both must agree.
runConvCase
  :: forall h w kh kw sh sw c f p b l ch g ai af wi wf bi bf ci cf oi fo t
   . ( KnownNat h, KnownNat w, KnownNat kh, KnownNat kw, KnownNat sh, KnownNat sw
     , KnownNat c, 1 <= kh, 1 <= kw, 1 <= sh, 1 <= sw, kh <= h, kw <= w
     , EngineShape (kh * kw * c) f p b ch g, KnownNat l, TableRegs t, Accumulates ai af wi wf bi bf ci cf
     , KnownNat oi, KnownNat fo )
  => FilePath
  -> Proxy (Vec c (SFixed ai af))
  -> SNat h -> SNat w -> SNat kh -> SNat kw -> SNat sh -> SNat sw
  -> SNat f
  -> SNat p -> SNat b -> SNat l
  -> WeightRom (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) (SFixed oi fo)
  -> IO ()
runConvCase prefix _ h w kh kw sh sw _ p b l rom finish = do
  (count, pattern, items) <- readCase @c @ai @af (prefix ++ ".in")
  let whole :: Stream System (Vec c (SFixed ai af)) (Vec f (SFixed oi fo))
      whole = withSystem (conv2d h w kh kw sh sw p b l direct rom finish)
      ((windows, readyMid), held) = withSystem (windowHeld h w kh kw sh sw) (input2, readyMid2)
      mid  = fmap flattenWindow <$> windows
      back :: Stream System (Vec (kh * kw * c) (SFixed ai af)) (Vec f (SFixed oi fo))
      back  = withSystem (engineFrom p b l (afterAccept (flattenWindow <$> held)) rom finish)
      (output, readyIn)  = whole (input, readyOut)
      (output2, readyMid2) = back (mid, readyOut)
      input    = drive items readyIn
      input2   = drive items readyMid
      readyOut = readies pattern
      trace i r o = zipWith4' (\t x y z -> inEvent t x y ++ outEvent t z)
                      [-1 ..] (signalList i) (signalList r) (zip (signalList o) (signalList readyOut))
      events   = drop 1 (trace input readyIn output)
      events2  = drop 1 (trace input2 readyMid output2)
      mids     = drop 1 (zipWith3 midEvent [-1 ..] (signalList mid) (signalList readyMid2))
      -- Per cycle: input, then window stream, then output events.
      merged   = zipWith (\e m -> filter isIn e ++ m ++ filter (not . isIn) e) events2 mids
      isIn e   = take 2 e == "A "
  writeFile (prefix ++ ".out") (unlines (concat (upTo count merged)))
  -- The composition by hand and 'conv2d' must behave identically.
  if upTo count events == upTo count events2
    then pure ()
    else writeFile (prefix ++ ".mismatch") "conv2d differs from its parts\n"
  where
    midEvent :: Int -> Maybe x -> Bool -> [String]
    midEvent t m rm = [ "M " ++ show t | isJust m ] ++ [ "a " ++ show t | isJust m && rm ]

-- | The cycles up to the one with the @count@-th output, at most 'budget'.
upTo :: Int -> [[String]] -> [[String]]
upTo count = go 0 . take budget
  where
    go seen (cycle : rest)
      | seen' >= count = [cycle]
      | otherwise      = cycle : go seen' rest
      where seen' = seen + length (filter ((== "O ") . take 2) cycle)
    go _ [] = []

withSystem :: (HiddenClockResetEnable System => r) -> r
withSystem = withClockResetEnable (clockGen :: Clock System) (resetGenN (SNat @1)) enableGen

inEvent :: Int -> Maybe a -> Bool -> [String]
inEvent t i r = [ "A " ++ show t | isJust i && r ]

outEvent :: (KnownNat n, KnownNat oi, KnownNat fo)
         => Int -> (Maybe (Vec n (SFixed oi fo)), Bool) -> [String]
outEvent t (Just v, True) = [unwords ("O" : show t : map (show . toInteger . unSF) (toList v))]
outEvent _ _              = []

-- | Downstream ready: reset cycle, the pattern, then always.
readies :: String -> Signal System Bool
readies pattern = fromList (True : map (== '1') (filter (/= '-') pattern) ++ repeat True)

readCase
  :: forall n ai af . (KnownNat n, KnownNat ai, KnownNat af)
  => FilePath -> IO (Int, String, [Maybe (Vec n (SFixed ai af))])
readCase path = do
  text <- readFile path
  case lines text of
    header : rest | [count, pattern] <- words header ->
      pure (read count, pattern, concatMap item rest)
    _              -> error ("bad header in case file " ++ path)
  where
    item line = case map read (words line) of
      gap : raws | length raws == natToNum @n ->
        replicate (fromInteger gap) Nothing ++ [Just (beat raws)]
      _ -> error ("bad line in " ++ path ++ ": " ++ line)
    beat raws = fmap (\i -> sf (SNat @af) (fromInteger (raws !! fromEnum i))) indicesI

-- | The input signal: a reset cycle, then each scheduled beat shown until it
-- moves; @Nothing@ entries are idle cycles.
drive :: [Maybe a] -> Signal System Bool -> Signal System (Maybe a)
drive items0 ~(_ :- readies0) = Nothing :- go items0 readies0
  where
    go items ~(ready :- rest) = case items of
      []            -> Nothing :- go [] rest
      Nothing : xs  -> Nothing :- go xs rest
      Just x : xs   -> Just x :- go (if ready then xs else items) rest

fromList :: [a] -> Signal System a
fromList (x : xs) = x :- fromList xs
fromList []       = error "Driver.fromList: finite list"

signalList :: Signal System a -> [a]
signalList (x :- xs) = x : signalList xs

zipWith4' :: (a -> b -> c -> d -> e) -> [a] -> [b] -> [c] -> [d] -> [e]
zipWith4' f (a : as) (b : bs) (c : cs) (d : ds) = f a b c d : zipWith4' f as bs cs ds
zipWith4' _ _ _ _ _ = []
